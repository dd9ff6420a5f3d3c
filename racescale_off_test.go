//go:build !race

package cache

// raceEnabled: see racescale_on_test.go.
const raceEnabled = false
