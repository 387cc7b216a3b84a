package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ordergate/ordergate/testkit/testserver"
)

// BuildBinaries compiles cmd/gateway and cmd/worker (without -race: they are
// the system under test, not the harness) into dir.
func BuildBinaries(t testing.TB, dir string) (gateway, worker string) {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = "/usr/local/go/bin/go"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, goTool, "build", "-o", dir+string(filepath.Separator),
		"github.com/ordergate/ordergate/cmd/gateway", "github.com/ordergate/ordergate/cmd/worker")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("chaos: go build gateway and worker: %v\n%s", err, out)
	}
	return filepath.Join(dir, "gateway"), filepath.Join(dir, "worker")
}

// process is one run of a binary; its output goes to a log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	err     error
}

func startProcess(name, binary, logPath string, env []string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(binary)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// Started through testserver so Pdeathsig kills the child with the test binary.
	if err := testserver.StartChild(cmd); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

func (p *process) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

func (p *process) signal(sig syscall.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("%s %s: %w", sig, p.name, err)
	}
	return nil
}

// kill sends SIGKILL and waits for the exit.
func (p *process) kill() {
	_ = p.signal(syscall.SIGKILL)
	<-p.exited
}

// terminate asks for a graceful exit (SIGCONT first, in case it is
// stopped) and kills it after grace.
func (p *process) terminate(grace time.Duration) {
	if !p.alive() {
		return
	}
	_ = p.signal(syscall.SIGCONT)
	_ = p.signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		p.kill()
	}
}

// waitHTTP polls url until it answers 200, the process exits or timeout.
func (p *process) waitHTTP(url string, timeout time.Duration) error {
	client := &http.Client{Timeout: 500 * time.Millisecond}
	deadline := time.Now().Add(timeout)
	for {
		res, err := client.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %d", res.StatusCode)
		}
		if !p.alive() {
			return fmt.Errorf("%s exited during startup (%v):\n%s", p.name, p.err, logTail(p.logPath, 4096))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s (%v):\n%s", p.name, timeout, err, logTail(p.logPath, 4096))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func logTail(path string, n int) string {
	content, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	if len(content) > n {
		content = content[len(content)-n:]
	}
	return "--- " + path + " (tail) ---\n" + string(content)
}

// freeAddr reserves a loopback port and returns it; the child binds it
// shortly after.
func freeAddr() (string, error) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer listener.Close()
	return listener.Addr().String(), nil
}
