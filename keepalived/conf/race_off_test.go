//go:build !race

package conf

const raceEnabled = false
