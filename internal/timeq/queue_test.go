package timeq

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Items come out by when they are due, whatever order they went in:
// adaptive retry gives windows of different lengths.
func TestQueueOrdersByTime(t *testing.T) {
	var q Queue[int]
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 1000; i++ {
		q.Push((i*7919)%1000, t0.Add(time.Duration((i*7919)%1000)))
	}
	for i := 0; i < 1000; i++ {
		it := q.Peek()
		require.NotNil(t, it)
		require.Equal(t, i, it.Value)
		require.Equal(t, it, q.Pop())
		require.False(t, it.Queued())
		require.Equal(t, 999-i, q.Len())
	}
	assert.Nil(t, q.Peek())
	assert.Nil(t, q.Pop())
}

func TestQueueMoveRemoveAndPopDue(t *testing.T) {
	var q Queue[string]
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := q.Push("a", t0.Add(3*time.Second))
	b := q.Push("b", t0.Add(2*time.Second))
	c := q.Push("c", t0.Add(time.Second))
	assert.Nil(t, q.PopDue(t0), "nothing due yet")
	q.Move(a, t0)
	assert.Equal(t, a, q.PopDue(t0), "moved to the front")
	q.Remove(c)
	q.Remove(c) // twice: no effect
	assert.False(t, c.Queued())
	assert.Equal(t, 1, q.Len())
	assert.Nil(t, q.PopDue(t0.Add(time.Second)))
	assert.Equal(t, b, q.PopDue(t0.Add(2*time.Second)))
	var nilItem *Item[string]
	assert.False(t, nilItem.Queued())
	n := 0
	q.Push("d", t0)
	q.Push("e", t0)
	q.Each(func(*Item[string]) { n++ })
	assert.Equal(t, 2, n)
}
