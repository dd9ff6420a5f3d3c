// Package timeq is a queue of values by the time each is due: a min-heap
// whose items know their place, so that one can be moved or removed in
// O(log n). It is not safe for concurrent use; its owner locks.
package timeq

import (
	"container/heap"
	"time"
)

// Item is a value in a Queue, due At.
type Item[T any] struct {
	Value T
	At    time.Time
	index int // in the heap; -1 once out of it
}

// Queued reports whether it is in a queue.
func (it *Item[T]) Queued() bool { return it != nil && it.index >= 0 }

// Queue holds items by At, the earliest first. The zero value is empty and
// ready to use.
type Queue[T any] struct {
	h items[T]
}

// Len is the number of items queued.
func (q *Queue[T]) Len() int { return len(q.h) }

// Push queues v, due at, and returns its item.
func (q *Queue[T]) Push(v T, at time.Time) *Item[T] {
	it := &Item[T]{Value: v, At: at}
	heap.Push(&q.h, it)
	return it
}

// Peek returns the item due first, without taking it out; nil when empty.
func (q *Queue[T]) Peek() *Item[T] {
	if len(q.h) == 0 {
		return nil
	}
	return q.h[0]
}

// Pop takes out the item due first; nil when empty.
func (q *Queue[T]) Pop() *Item[T] {
	if len(q.h) == 0 {
		return nil
	}
	return heap.Pop(&q.h).(*Item[T])
}

// PopDue takes out the item due first if it is due by now; nil otherwise.
func (q *Queue[T]) PopDue(now time.Time) *Item[T] {
	if it := q.Peek(); it != nil && !it.At.After(now) {
		return q.Pop()
	}
	return nil
}

// Move makes it, which is queued, due at.
func (q *Queue[T]) Move(it *Item[T], at time.Time) {
	it.At = at
	heap.Fix(&q.h, it.index)
}

// Remove takes it out of the queue, if it is in it.
func (q *Queue[T]) Remove(it *Item[T]) {
	if it.Queued() {
		heap.Remove(&q.h, it.index)
	}
}

// Each calls f for every item, in no order; f must not change the queue.
func (q *Queue[T]) Each(f func(*Item[T])) {
	for _, it := range q.h {
		f(it)
	}
}

// items is the heap under a Queue.
type items[T any] []*Item[T]

func (h items[T]) Len() int           { return len(h) }
func (h items[T]) Less(i, j int) bool { return h[i].At.Before(h[j].At) }
func (h items[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *items[T]) Push(x any) {
	it := x.(*Item[T])
	it.index = len(*h)
	*h = append(*h, it)
}
func (h *items[T]) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	it.index = -1
	*h = old[:len(old)-1]
	return it
}
