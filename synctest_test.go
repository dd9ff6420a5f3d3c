//go:build go1.25

// testing/synctest needs the Go 1.23 timer semantics, which a module that
// declares go 1.22 does not get by default. This only affects the test
// binary; users of the package keep the semantics of their own go.mod.
//go:debug asynctimerchan=0

package cache
