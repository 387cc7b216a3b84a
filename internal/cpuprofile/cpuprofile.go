// Package cpuprofile writes a Go CPU profile of the running process to a
// file, for the commands that offer one (the gateway's CPU_PROFILE, the
// bench's profiling flags).
package cpuprofile

import (
	"os"
	"runtime/pprof"
)

// Start profiles the process's CPU into path until the returned stop.
func Start(path string) (stop func() error, err error) {
	file, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(file); err != nil {
		file.Close()
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		return file.Close()
	}, nil
}
