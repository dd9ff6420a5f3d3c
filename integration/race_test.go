//go:build race

package integration

// raceEnabled is set when the tests are built with the race detector,
// which slows them and changes their memory figures.
const raceEnabled = true
