//go:build race

package terraform

// raceEnabled: the race detector changes what allocates.
const raceEnabled = true
