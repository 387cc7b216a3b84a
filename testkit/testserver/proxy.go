package testserver

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy in front of one or more servers, for tests of what a
// client does when the network loses or holds back a reply to a command the
// server did run. It forwards bytes as they come and, once a fault is armed,
// acts on the next command (client bytes) holding the fault's match:
// DelayReply holds the server's reply back, DropReply resets the client's
// connection as soon as the server has answered. Each fault acts once but
// goes on counting the commands that hold its match, so a test sees whether
// the client sent a command again.
//
// The proxy does not parse RESP: a match is any byte string, found even
// across reads. Choose one that only the command under test carries (a job
// id, a script's SHA1 once the script is loaded, a key).
//
// Repoint moves a listener to another server, as a failover moves a
// primary's address: the clients keep the address and reach the new server.
type Proxy struct {
	mu      sync.Mutex
	fronts  map[string]*front // by the target each fronts now
	faults  []*Fault
	longest int // length of the longest match armed, for matches across reads
	conns   map[*proxiedConn]struct{}
	closed  bool

	wg sync.WaitGroup
}

// front is one listener of a Proxy and the server it forwards to.
type front struct {
	listener net.Listener
	target   string // guarded by Proxy.mu: Repoint changes it
}

// Fault is one armed fault of a Proxy.
type Fault struct {
	proxy *Proxy
	match []byte
	delay time.Duration // DelayReply
	drop  bool          // DropReply
	done  bool          // acted already
	seen  int
}

// Seen is how many commands holding the fault's match passed the proxy, the
// one it acted on included.
func (f *Fault) Seen() int {
	f.proxy.mu.Lock()
	defer f.proxy.mu.Unlock()
	return f.seen
}

// StartProxy listens on a free loopback port for each target address and
// forwards every connection to its target; it stops at t.Cleanup, cutting
// the connections still open.
func StartProxy(t testing.TB, targets ...string) *Proxy {
	t.Helper()
	p := &Proxy{fronts: make(map[string]*front, len(targets)), conns: make(map[*proxiedConn]struct{})}
	t.Cleanup(p.close)
	for _, target := range targets {
		listener, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("testserver: proxy for %s: %v", target, err)
		}
		f := &front{listener: listener, target: target}
		p.fronts[target] = f
		p.wg.Add(1)
		go p.accept(f)
	}
	return p
}

// Addr is the address the proxy listens on for target; empty when no
// listener fronts target (any more).
func (p *Proxy) Addr(target string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if f, ok := p.fronts[target]; ok {
		return f.listener.Addr().String()
	}
	return ""
}

// Repoint makes the listener that fronts from forward to to instead, as a
// failover moves a primary's address to its promoted replica: the
// connections it has open are cut (their clients read the end of the
// connection, as when the old server goes away), and the ones it accepts
// from now on reach to. Addr(to) is then that listener's address, and from
// is fronted no more, so a second Repoint(to, from) goes back. It fails when
// no listener fronts from, or one fronts to already.
func (p *Proxy) Repoint(from, to string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, ok := p.fronts[from]
	if !ok {
		return fmt.Errorf("testserver: repoint %s: the proxy does not front it", from)
	}
	if _, taken := p.fronts[to]; taken {
		return fmt.Errorf("testserver: repoint %s to %s: a listener fronts %s already", from, to, to)
	}
	delete(p.fronts, from)
	f.target = to
	p.fronts[to] = f
	for conn := range p.conns {
		if conn.front == f {
			conn.close() // its goroutines forget it
		}
	}
	return nil
}

// Dial connects to the proxy of the target addr, as a go-redis Dialer: a
// cluster client told of the servers' own addresses then reaches every node
// through the proxy. An address the proxy does not front is refused.
func (p *Proxy) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	proxied := p.Addr(addr)
	if proxied == "" {
		return nil, fmt.Errorf("testserver: the proxy does not front %s", addr)
	}
	var dialer net.Dialer
	return dialer.DialContext(ctx, network, proxied)
}

// DelayReply arms a fault: the next command holding match reaches the server
// at once, but what the server sends back on that connection reaches the
// client only delay later, or never when the client closes the connection
// first (as go-redis does after a read timeout). With no delay the fault
// only counts.
func (p *Proxy) DelayReply(match string, delay time.Duration) *Fault {
	return p.arm(&Fault{match: []byte(match), delay: delay})
}

// DropReply arms a fault: the next command holding match reaches the server,
// and once the server answers, the reply is thrown away and the client's
// connection reset, as when a link or a server dies after the command ran.
func (p *Proxy) DropReply(match string) *Fault {
	return p.arm(&Fault{match: []byte(match), drop: true})
}

func (p *Proxy) arm(fault *Fault) *Fault {
	if len(fault.match) == 0 {
		panic("testserver: a proxy fault needs a match")
	}
	fault.proxy = p
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = append(p.faults, fault)
	p.longest = max(p.longest, len(fault.match))
	return fault
}

func (p *Proxy) close() {
	p.mu.Lock()
	p.closed = true
	for conn := range p.conns {
		conn.close()
	}
	fronts := slices.Collect(maps.Values(p.fronts))
	p.mu.Unlock()
	for _, f := range fronts {
		_ = f.listener.Close()
	}
	p.wg.Wait()
}

func (p *Proxy) accept(f *front) {
	defer p.wg.Done()
	for {
		client, err := f.listener.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		target := f.target
		p.mu.Unlock()
		server, err := net.DialTimeout("tcp", target, 2*time.Second)
		if err != nil {
			_ = client.Close()
			continue
		}
		conn := &proxiedConn{front: f, client: client.(*net.TCPConn), server: server, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			conn.close()
			return
		}
		if f.target != target {
			// Repointed while this one dialed the old target: cut, as the
			// repoint cut the others.
			p.mu.Unlock()
			conn.close()
			continue
		}
		p.conns[conn] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.forward(conn)
		go p.backward(conn)
	}
}

// proxiedConn is one client connection and its connection to the server.
type proxiedConn struct {
	front  *front // the listener that accepted it
	client *net.TCPConn
	server net.Conn

	// Set by forward under Proxy.mu before the command goes on, read by
	// backward: the reply to hold back until holdUntil, or to drop.
	holdUntil time.Time
	drop      bool

	closeOnce sync.Once
	done      chan struct{}
}

func (c *proxiedConn) close() {
	c.closeOnce.Do(func() {
		close(c.done)
		_ = c.client.Close()
		_ = c.server.Close()
	})
}

// forward copies the client's commands to the server, arming the
// connection for a fault before the command that triggers it goes on.
func (p *Proxy) forward(conn *proxiedConn) {
	defer p.wg.Done()
	defer p.forget(conn)
	buf := make([]byte, 64<<10)
	var tail []byte // the end of the previous read, for matches across reads
	for {
		n, err := conn.client.Read(buf)
		if n > 0 {
			tail = p.inspect(conn, tail, buf[:n])
			if _, err := conn.server.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// inspect counts the matches in what the client sent and arms conn for the
// faults they trigger; it returns the tail to keep for the next read.
func (p *Proxy) inspect(conn *proxiedConn, tail, chunk []byte) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	seen := append(tail, chunk...)
	for _, fault := range p.faults {
		found := 0
		for at := 0; ; {
			i := bytes.Index(seen[at:], fault.match)
			if i < 0 {
				break
			}
			// A match lying wholly in the tail was counted with the last read.
			if at+i+len(fault.match) > len(tail) {
				found++
			}
			at += i + 1
		}
		if found == 0 {
			continue
		}
		fault.seen += found
		if fault.done {
			continue
		}
		fault.done = true
		if fault.drop {
			conn.drop = true
		} else {
			conn.holdUntil = time.Now().Add(fault.delay)
		}
	}
	keep := max(p.longest-1, 0)
	if len(seen) > keep {
		seen = seen[len(seen)-keep:]
	}
	return append([]byte(nil), seen...)
}

// backward copies the server's replies to the client, holding them back or
// dropping them when the connection is armed so.
func (p *Proxy) backward(conn *proxiedConn) {
	defer p.wg.Done()
	defer p.forget(conn)
	buf := make([]byte, 64<<10)
	for {
		n, err := conn.server.Read(buf)
		if n > 0 {
			p.mu.Lock()
			holdUntil, drop := conn.holdUntil, conn.drop
			p.mu.Unlock()
			if drop {
				// Linger 0 makes Close send a reset instead of an orderly end.
				_ = conn.client.SetLinger(0)
				return
			}
			if wait := time.Until(holdUntil); wait > 0 {
				timer := time.NewTimer(wait)
				select {
				case <-timer.C:
				case <-conn.done:
					timer.Stop()
					return
				}
			}
			if _, err := conn.client.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// forget closes both sides of conn and drops it from the proxy's set.
func (p *Proxy) forget(conn *proxiedConn) {
	conn.close()
	p.mu.Lock()
	delete(p.conns, conn)
	p.mu.Unlock()
}
