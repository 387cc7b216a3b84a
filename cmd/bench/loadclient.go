package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// The load generator speaks HTTP/1.1 itself rather than through net/http's
// client: it shares the cores with the gateway it measures, and the client's
// request building, header maps and two goroutines per connection would take
// CPU a real deployment's clients spend on their own machines. Each request
// is written from a pre-built template and its answer parsed in place: a
// request costs the generator a write, the reads of its answer and no
// allocation, on the caller's goroutine alone.

var (
	// errNoContentLength: without a length the end of the body is only known
	// when the gateway closes the connection, which a keep-alive load cannot
	// wait for.
	errNoContentLength = errors.New("response without Content-Length")
	// errChunked: the gateway's answers are small enough for net/http to send
	// with a length; a chunked one means something else is answering.
	errChunked = errors.New("response with Transfer-Encoding (chunked), which the load client does not read")
	// errMalformed is a response that is not HTTP/1.x.
	errMalformed = errors.New("malformed HTTP response")
)

// statusError is an answer other than 202 Accepted, with the start of its body.
type statusError struct {
	Method, Path string
	Status       int
	Body         string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("%s %s answered %d: %.200s", e.Method, e.Path, e.Status, e.Body)
}

// defaultRequestTimeout bounds one request, writing it and reading its
// answer, so a hung gateway fails the phase instead of hanging it.
const defaultRequestTimeout = 10 * time.Second

// orderClient sends distinct valid orders: each has its own client_order_id,
// and the keys are used in turn. One request is in flight per connection (no
// pipelining), so a latency is one request's; there are as many connections
// as concurrent callers, up to conns kept between requests.
type orderClient struct {
	addr    string
	path    string
	timeout time.Duration
	// heads holds, per key, the request up to the Content-Length value.
	heads    [][]byte
	bodyHead []byte
	bodyTail []byte
	idle     chan *loadConn
	seq      atomic.Int64
}

// loadConn is one persistent connection with its read buffer and the buffer
// its requests are written from.
type loadConn struct {
	net.Conn
	reader  *bufio.Reader
	request []byte
	// reused is set once the connection has carried an answer: the gateway
	// may close it while idle, and the next request then meets an EOF before
	// any byte of its answer.
	reused bool
	// deadline is the connection's read and write deadline; see roundTrip.
	deadline time.Time
}

func newOrderClient(rawURL string, keys []string, prefix string, conns int) *orderClient {
	return newSidedOrderClient(rawURL, keys, prefix, conns, "buy")
}

// newSidedOrderClient is newOrderClient placing orders of side ("buy" or
// "sell") at the same price, so two of them trade.
func newSidedOrderClient(rawURL string, keys []string, prefix string, conns int, side string) *orderClient {
	target, err := url.Parse(rawURL)
	if err != nil || target.Scheme != "http" || target.Host == "" {
		// The URL comes from startGateway; a bad one is a bug here.
		panic(fmt.Sprintf("load client: %q is not an http:// URL", rawURL))
	}
	path := target.RequestURI()
	c := &orderClient{
		addr:     target.Host,
		path:     path,
		timeout:  defaultRequestTimeout,
		bodyHead: []byte(`{"client_order_id":"` + prefix),
		bodyTail: []byte(`","symbol":"BTC-USD","side":"` + side + `","type":"limit","quantity":"0.01000","price":"50000.00"}`),
		idle:     make(chan *loadConn, conns),
	}
	for _, key := range keys {
		c.heads = append(c.heads, []byte("POST "+path+" HTTP/1.1\r\n"+
			"Host: "+target.Host+"\r\n"+
			"Authorization: Bearer "+key+"\r\n"+
			"Content-Type: application/json\r\n"+
			"Content-Length: "))
	}
	return c
}

// place sends one order and counts it placed only on 202 Accepted.
func (c *orderClient) place(ctx context.Context) error {
	n := c.seq.Add(1)
	return c.send(ctx, func(b []byte) []byte { return c.appendRequest(b, n) })
}

// placeBody sends the order body (a placeOrder request's JSON) with the
// key of index key, counted as place counts it.
func (c *orderClient) placeBody(ctx context.Context, key int, body []byte) error {
	return c.send(ctx, func(b []byte) []byte {
		b = append(b, c.heads[key]...)
		b = strconv.AppendInt(b, int64(len(body)), 10)
		b = append(b, "\r\n\r\n"...)
		return append(b, body...)
	})
}

// send writes the request build appends and reads its answer.
func (c *orderClient) send(ctx context.Context, build func([]byte) []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	conn, err := c.take(ctx)
	if err != nil {
		return err
	}
	conn.request = build(conn.request[:0])
	status, keepAlive, err := c.roundTrip(conn)
	if err != nil && conn.reused && stale(err) {
		// Nothing of this request reached a handler: the gateway had closed
		// the idle connection. net/http's transport retries these too.
		conn.Close()
		if conn, err = c.dial(ctx); err != nil {
			return err
		}
		conn.request = build(conn.request[:0])
		status, keepAlive, err = c.roundTrip(conn)
	}
	if err != nil {
		conn.Close()
		return err
	}
	if keepAlive {
		c.give(conn)
	} else {
		conn.Close()
	}
	return status
}

// take hands out an idle connection, or dials one when every connection is
// busy: there are as many connections as concurrent callers.
func (c *orderClient) take(ctx context.Context) (*loadConn, error) {
	select {
	case conn := <-c.idle:
		return conn, nil
	default:
		return c.dial(ctx)
	}
}

func (c *orderClient) give(conn *loadConn) {
	select {
	case c.idle <- conn:
	default:
		conn.Close()
	}
}

func (c *orderClient) dial(ctx context.Context) (*loadConn, error) {
	dialer := net.Dialer{Timeout: c.timeout}
	conn, err := dialer.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return nil, fmt.Errorf("load client: %w", err)
	}
	return &loadConn{Conn: conn, reader: bufio.NewReaderSize(conn, 4096), request: make([]byte, 0, 512)}, nil
}

// close closes the idle connections.
func (c *orderClient) close() {
	for {
		select {
		case conn := <-c.idle:
			conn.Close()
		default:
			return
		}
	}
}

// appendRequest appends order n's request: the same body net/http's client
// sent, with the key chosen the same way.
func (c *orderClient) appendRequest(b []byte, n int64) []byte {
	b = append(b, c.heads[n%int64(len(c.heads))]...)
	b = strconv.AppendInt(b, int64(len(c.bodyHead)+decimalDigits(n)+len(c.bodyTail)), 10)
	b = append(b, "\r\n\r\n"...)
	b = append(b, c.bodyHead...)
	b = strconv.AppendInt(b, n, 10)
	return append(b, c.bodyTail...)
}

func decimalDigits(n int64) int {
	digits := 1
	for ; n >= 10; n /= 10 {
		digits++
	}
	return digits
}

// roundTrip writes conn's request and reads the whole answer. The returned
// status is nil for 202 and a *statusError otherwise; err is a failure that
// leaves the connection unusable.
func (c *orderClient) roundTrip(conn *loadConn) (status error, keepAlive bool, err error) {
	// The deadline moves only once half the timeout is used up: setting it
	// for every request costs the generator two timer updates a request,
	// which would count against the gateway. A request gets between half the
	// timeout and all of it.
	if now := time.Now(); conn.deadline.Sub(now) < c.timeout/2 {
		conn.deadline = now.Add(c.timeout)
		if err := conn.SetDeadline(conn.deadline); err != nil {
			return nil, false, err
		}
	}
	if _, err := conn.Write(conn.request); err != nil {
		return nil, false, c.wrap(err)
	}
	code, keepAlive, length, err := readHead(conn.reader)
	if err != nil {
		return nil, false, c.wrap(err)
	}
	conn.reused = true
	if code == 202 {
		if _, err := conn.reader.Discard(length); err != nil {
			return nil, false, c.wrap(fmt.Errorf("body: %w", err))
		}
		return nil, keepAlive, nil
	}
	body := make([]byte, length)
	if _, err := io.ReadFull(conn.reader, body); err != nil {
		return nil, false, c.wrap(fmt.Errorf("body: %w", err))
	}
	return &statusError{Method: "POST", Path: c.path, Status: code, Body: string(body)}, keepAlive, nil
}

func (c *orderClient) wrap(err error) error {
	if isTimeout(err) {
		return fmt.Errorf("POST %s: no answer within %s: %w", c.path, c.timeout, err)
	}
	return fmt.Errorf("POST %s: %w", c.path, err)
}

func isTimeout(err error) bool {
	var timeout interface{ Timeout() bool }
	return errors.As(err, &timeout) && timeout.Timeout()
}

// stale tells whether err is a connection the peer had already closed: a
// write refused, or an EOF or reset before the first byte of the answer.
func stale(err error) bool {
	return errors.Is(err, errClosedBeforeAnswer) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}

var errClosedBeforeAnswer = errors.New("connection closed before the answer")

var (
	headerContentLength    = []byte("Content-Length")
	headerTransferEncoding = []byte("Transfer-Encoding")
	headerConnection       = []byte("Connection")
	itemClose              = []byte("close")
)

// readHead reads an HTTP/1.x status line and headers, returning the status
// code, whether the connection stays open and the body's length.
func readHead(r *bufio.Reader) (code int, keepAlive bool, length int, err error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		if len(line) == 0 && errors.Is(err, io.EOF) {
			return 0, false, 0, errClosedBeforeAnswer
		}
		return 0, false, 0, fmt.Errorf("status line: %w", err)
	}
	// "HTTP/1.1 202 Accepted\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return 0, false, 0, fmt.Errorf("%w: status line %q", errMalformed, bytes.TrimSpace(line))
	}
	keepAlive = line[7] == '1'
	code, ok := parseDecimal(line[9:12])
	if !ok || (len(line) > 12 && line[12] != ' ' && line[12] != '\r' && line[12] != '\n') {
		return 0, false, 0, fmt.Errorf("%w: status line %q", errMalformed, bytes.TrimSpace(line))
	}
	length = -1
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return 0, false, 0, fmt.Errorf("headers: %w", err)
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, found := bytes.Cut(line, []byte(":"))
		if !found {
			return 0, false, 0, fmt.Errorf("%w: header line %q", errMalformed, line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, headerContentLength):
			n, ok := parseDecimal(value)
			if !ok {
				return 0, false, 0, fmt.Errorf("%w: Content-Length %q", errMalformed, value)
			}
			length = n
		case bytes.EqualFold(name, headerTransferEncoding):
			return 0, false, 0, errChunked
		case bytes.EqualFold(name, headerConnection):
			if hasItem(value, itemClose) {
				keepAlive = false
			}
		}
	}
	if length < 0 {
		if code == 204 || code == 304 {
			return code, keepAlive, 0, nil
		}
		return 0, false, 0, fmt.Errorf("%w (status %d)", errNoContentLength, code)
	}
	return code, keepAlive, length, nil
}

func parseDecimal(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 9 {
		return 0, false
	}
	n := 0
	for _, d := range b {
		if d < '0' || d > '9' {
			return 0, false
		}
		n = n*10 + int(d-'0')
	}
	return n, true
}

// hasItem tells whether a comma-separated header value lists item.
func hasItem(value, item []byte) bool {
	for len(value) > 0 {
		var part []byte
		part, value, _ = bytes.Cut(value, []byte(","))
		if bytes.EqualFold(bytes.TrimSpace(part), item) {
			return true
		}
	}
	return false
}
