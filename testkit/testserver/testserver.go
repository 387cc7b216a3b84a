// Package testserver starts real, throwaway Redis and PostgreSQL servers for
// tests, so that integration tests exercise the servers' actual behaviour
// (Lua scripting, cluster slot routing, transactions, outages) instead of fakes.
//
// Every server listens on a free loopback port with its data in a temporary
// directory, so test binaries that `go test ./...` runs concurrently never
// share state. Each server is a child of the test binary in its own process
// group and is stopped at t.Cleanup (a test's own Redis) or when Main returns
// (the shared PostgreSQL and Redis Cluster); if the test binary dies without
// cleaning up (a -timeout panic, SIGKILL) the kernel kills the servers too, so
// no test run leaves processes behind.
package testserver

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// mainRunning is set by Main. The shared servers need it: only Main can
// stop them after the last test.
var mainRunning atomic.Bool

// Main runs the tests of a package and then stops the shared servers that
// were started: PostgreSQL and the Redis Cluster. Every test package that
// uses Postgres, SharedRedisCluster or QueueRedis has:
//
//	func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }
func Main(m *testing.M) int {
	mainRunning.Store(true)
	code := m.Run()
	// All tests have returned: nothing uses the shared servers any more.
	err := errors.Join(shutDownSharedPostgres(), shutDownSharedRedisCluster())
	if err != nil {
		fmt.Fprintf(os.Stderr, "testserver: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

func requireMain(t testing.TB, what string) {
	t.Helper()
	if !mainRunning.Load() {
		t.Fatalf("testserver: %s needs the package's TestMain to be\n\tfunc TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }\nso the shared server is stopped after the tests", what)
	}
}

const installHint = "run scripts/deps.sh (or `make test`, which runs it) to install the test servers"

// findBinary looks a server binary up on PATH and, failing that, in
// fallbackDirs, because Debian installs the PostgreSQL server binaries
// outside PATH.
func findBinary(name string, fallbackDirs ...string) (string, error) {
	if path, err := exec.LookPath(name); err == nil {
		return path, nil
	}
	for _, dir := range fallbackDirs {
		candidate := filepath.Join(dir, name)
		if info, err := os.Stat(candidate); err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
			return candidate, nil
		}
	}
	return "", fmt.Errorf("%s not found on PATH: %s", name, installHint)
}

// FreeAddr is an unused loopback address ("127.0.0.1:port") for a listener
// a test starts itself; as with freePort, another process may take it first.
func FreeAddr(t testing.TB) string {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// freePort asks the kernel for an unused loopback port. Another process can
// take it before the server binds it, which is why callers retry a start that
// fails to bind.
func freePort() (int, error) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("reserve a loopback port: %w", err)
	}
	defer listener.Close()
	return listener.Addr().(*net.TCPAddr).Port, nil
}

// spawnRequests carries every process start to one goroutine locked to its OS
// thread. Linux delivers a child's parent-death signal when the *thread* that
// forked it exits, not the process; forking from a thread that lives as long
// as the test binary makes Pdeathsig mean "kill the server when the test
// binary dies".
var (
	spawnRequests = make(chan spawnRequest)
	startSpawner  sync.Once
)

type spawnRequest struct {
	cmd    *exec.Cmd
	result chan error
}

// StartChild starts cmd from that long-lived thread, so a SysProcAttr
// Pdeathsig set on it kills the child when the test binary dies. Tests that
// run the project's own binaries (the chaos run) start them through it too.
func StartChild(cmd *exec.Cmd) error {
	startSpawner.Do(func() {
		go func() {
			runtime.LockOSThread() // never unlocked: the thread must outlive every child
			for request := range spawnRequests {
				request.result <- request.cmd.Start()
			}
		}()
	})
	request := spawnRequest{cmd: cmd, result: make(chan error, 1)}
	spawnRequests <- request
	return <-request.result
}

// serverProcess is a running server whose output goes to a log file, so a
// failed start can show why.
type serverProcess struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	waitErr error // valid once exited is closed
}

// processSpec describes how to run a server or tool binary.
type processSpec struct {
	path       string
	args       []string
	workDir    string
	logPath    string
	credential *syscall.Credential // nil runs as the current user
}

func (spec processSpec) command() (*exec.Cmd, *os.File, error) {
	logFile, err := os.OpenFile(spec.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("open log %s: %w", spec.logPath, err)
	}
	cmd := exec.Command(spec.path, spec.args...)
	cmd.Dir = spec.workDir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own process group: the servers' helper processes can be killed
		// together, and a terminal's Ctrl-C reaches only `go test`, which
		// then stops the servers in order.
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
		Credential: spec.credential,
	}
	return cmd, logFile, nil
}

func startServerProcess(name string, spec processSpec) (*serverProcess, error) {
	cmd, logFile, err := spec.command()
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child holds its own descriptor
	if err := StartChild(cmd); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	process := &serverProcess{name: name, cmd: cmd, logPath: spec.logPath, exited: make(chan struct{})}
	go func() {
		process.waitErr = cmd.Wait()
		close(process.exited)
	}()
	return process, nil
}

// runToCompletion runs a short-lived tool (initdb, redis-cli) and returns an
// error carrying its output when it fails.
func runToCompletion(name string, spec processSpec, timeout time.Duration) error {
	cmd, logFile, err := spec.command()
	if err != nil {
		return err
	}
	defer logFile.Close()
	if err := StartChild(cmd); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(timeout):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		err = fmt.Errorf("timed out after %s", timeout)
	}
	if err != nil {
		return fmt.Errorf("%s: %w\n%s", name, err, logTail(spec.logPath))
	}
	return nil
}

func (p *serverProcess) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// stop sends signal to the server, waits up to grace for it to exit and then
// kills whatever is left of its process group, so that a hung shutdown or an
// orphaned helper process cannot outlive the test.
func (p *serverProcess) stop(signal syscall.Signal, grace time.Duration) error {
	pid := p.cmd.Process.Pid
	var stopErr error
	if !p.hasExited() {
		_ = syscall.Kill(pid, signal)
		select {
		case <-p.exited:
		case <-time.After(grace):
			stopErr = fmt.Errorf("%s (pid %d) ignored %s for %s and was killed", p.name, pid, signal, grace)
		}
	}
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		stopErr = errors.Join(stopErr, fmt.Errorf("kill process group of %s: %w", p.name, err))
	}
	<-p.exited
	return stopErr
}

// waitUntilReady polls probe until it succeeds, the server exits or timeout
// passes. The short first intervals matter: most starts take milliseconds.
func (p *serverProcess) waitUntilReady(timeout time.Duration, probe func() error) error {
	deadline := time.Now().Add(timeout)
	interval := 2 * time.Millisecond
	for {
		lastErr := probe()
		if lastErr == nil {
			return nil
		}
		if p.hasExited() {
			return fmt.Errorf("%s exited during startup (%v):\n%s", p.name, p.waitErr, logTail(p.logPath))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s (last probe: %w):\n%s", p.name, timeout, lastErr, logTail(p.logPath))
		}
		time.Sleep(interval)
		interval = min(interval*2, 50*time.Millisecond)
	}
}

// logTail returns the last lines of a server log for failure messages.
func logTail(path string) string {
	const maxBytes = 4096
	content, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	if len(content) > maxBytes {
		content = content[len(content)-maxBytes:]
		if newline := bytes.IndexByte(content, '\n'); newline >= 0 {
			content = content[newline+1:]
		}
	}
	return "--- " + path + " (tail) ---\n" + string(content)
}

func addr(port int) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}
