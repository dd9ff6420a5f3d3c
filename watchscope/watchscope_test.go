package watchscope

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type testScope struct{ Scope }

func TestScopeContext(t *testing.T) {
	assert.Nil(t, FromContext(nil)) //nolint:staticcheck // a nil context is what registry.WatchOptions holds by default
	assert.Nil(t, FromContext(context.Background()))
}

func TestFilterContext(t *testing.T) {
	assert.Nil(t, Filter(nil), "no context") //nolint:staticcheck // a nil context is what registry.WatchOptions holds by default
	assert.Nil(t, Filter(context.Background()), "a context without a filter")
	assert.Nil(t, Filter(WithFilter(context.Background(), nil)), "a nil filter")

	keep := func(s string) bool { return s == "kept" }
	ctx := context.WithValue(WithFilter(context.Background(), keep), struct{}{}, 1)
	f := Filter(ctx)
	require.NotNil(t, f, "a filter below other values")
	assert.True(t, f("kept"))
	assert.False(t, f("other"))
}

func TestScopeBelowOtherValues(t *testing.T) {
	s := testScope{}
	ctx := context.WithValue(NewContext(context.Background(), s), struct{}{}, 1)
	assert.Equal(t, Scope(s), FromContext(ctx))
	assert.Nil(t, Filter(ctx), "a scope is no filter")
	require.Nil(t, FromContext(WithFilter(context.Background(), func(string) bool { return true })), "a filter is no scope")
}
