package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// loadServer serves handler on loopback and counts the connections made to it.
func loadServer(t testing.TB, handler http.HandlerFunc) (server *httptest.Server, conns *atomic.Int64) {
	t.Helper()
	conns = new(atomic.Int64)
	server = httptest.NewUnstartedServer(handler)
	server.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			conns.Add(1)
		}
	}
	server.Start()
	t.Cleanup(server.Close)
	return server, conns
}

// acceptOrder answers 202 to an order shaped as the load client must send
// it, and 400 naming what is wrong otherwise.
func acceptOrder(keys []string, prefix string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var order map[string]string
		if err := json.Unmarshal(body, &order); err != nil {
			http.Error(w, "body: "+err.Error(), http.StatusBadRequest)
			return
		}
		n, err := strconv.ParseInt(strings.TrimPrefix(order["client_order_id"], prefix), 10, 64)
		if err != nil {
			http.Error(w, "client_order_id: "+err.Error(), http.StatusBadRequest)
			return
		}
		want := `{"client_order_id":"` + prefix + strconv.FormatInt(n, 10) +
			`","symbol":"BTC-USD","side":"buy","type":"limit","quantity":"0.01000","price":"50000.00"}`
		for _, problem := range []struct{ what, got, want string }{
			{"method", r.Method, http.MethodPost},
			{"path", r.URL.Path, "/v1/orders"},
			{"Authorization", r.Header.Get("Authorization"), "Bearer " + keys[n%int64(len(keys))]},
			{"Content-Type", r.Header.Get("Content-Type"), "application/json"},
			{"Content-Length", strconv.FormatInt(r.ContentLength, 10), strconv.Itoa(len(want))},
			{"body", string(body), want},
		} {
			if problem.got != problem.want {
				http.Error(w, problem.what+" is "+problem.got+", want "+problem.want, http.StatusBadRequest)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, `{"id":"ord-`+strconv.FormatInt(n, 10)+`","status":"pending"}`)
	}
}

func TestOrderClient(t *testing.T) {
	keys := []string{"key-a", "key-b", "key-c"}
	const prefix = "t-"
	tests := []struct {
		name     string
		handler  http.HandlerFunc
		timeout  time.Duration
		requests int
		// between runs after the first request.
		between    func(*httptest.Server)
		wantPlaced int
		wantConns  int64
		// The first error: its status, the sentinel it wraps, text it holds.
		wantStatus int
		wantIs     error
		wantText   string
	}{
		{
			name:     "202 counted, one connection kept alive",
			handler:  acceptOrder(keys, prefix),
			requests: 7, wantPlaced: 7, wantConns: 1,
		},
		{
			name: "4xx reported with its status and body",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(http.StatusUnprocessableEntity)
				_, _ = io.WriteString(w, `{"title":"insufficient funds"}`)
			},
			requests: 2, wantConns: 1,
			wantStatus: 422, wantText: `POST /v1/orders answered 422: {"title":"insufficient funds"}`,
		},
		{
			name: "5xx reported with its status",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				http.Error(w, "queue unavailable", http.StatusServiceUnavailable)
			},
			requests: 1, wantConns: 1,
			wantStatus: 503, wantText: "answered 503: queue unavailable",
		},
		{
			name: "chunked answer refused",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusAccepted)
				_, _ = io.WriteString(w, `{"id":`)
				w.(http.Flusher).Flush()
				_, _ = io.WriteString(w, `"ord-1"}`)
			},
			requests: 1, wantConns: 1,
			wantIs: errChunked, wantText: "Transfer-Encoding",
		},
		{
			name: "answer without Content-Length refused",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				conn, buffered, err := w.(http.Hijacker).Hijack()
				if err != nil {
					return
				}
				defer conn.Close()
				_, _ = buffered.WriteString("HTTP/1.1 202 Accepted\r\nContent-Type: application/json\r\n\r\n{}")
				_ = buffered.Flush()
			},
			requests: 1, wantConns: 1,
			wantIs: errNoContentLength, wantText: "without Content-Length",
		},
		{
			name: "Connection: close answered, next request redials",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Connection", "close")
				acceptOrder(keys, prefix)(w, r)
			},
			requests: 3, wantPlaced: 3, wantConns: 3,
		},
		{
			name:     "idle connection closed by the server, request sent again on a new one",
			handler:  acceptOrder(keys, prefix),
			between:  func(s *httptest.Server) { s.CloseClientConnections() },
			requests: 2, wantPlaced: 2, wantConns: 2,
		},
		{
			name: "slow server hits the deadline",
			handler: func(_ http.ResponseWriter, r *http.Request) {
				// Once the body is read the server watches the connection,
				// so the client hanging up ends the handler.
				_, _ = io.Copy(io.Discard, r.Body)
				select {
				case <-r.Context().Done():
				case <-time.After(10 * time.Second):
				}
			},
			timeout:  50 * time.Millisecond,
			requests: 1, wantConns: 1,
			wantIs: os.ErrDeadlineExceeded, wantText: "no answer within 50ms",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			server, conns := loadServer(t, tt.handler)
			client := newOrderClient(server.URL+"/v1/orders", keys, prefix, 4)
			t.Cleanup(client.close)
			if tt.timeout > 0 {
				client.timeout = tt.timeout
			}
			placed := 0
			var first error
			for i := range tt.requests {
				if i == 1 && tt.between != nil {
					tt.between(server)
				}
				if err := client.place(context.Background()); err != nil {
					first = keepFirst(first, err)
					continue
				}
				placed++
			}
			if placed != tt.wantPlaced {
				t.Errorf("placed %d of %d, want %d (first error: %v)", placed, tt.requests, tt.wantPlaced, first)
			}
			if got := conns.Load(); got != tt.wantConns {
				t.Errorf("the server saw %d connections, want %d", got, tt.wantConns)
			}
			wantError := tt.wantStatus != 0 || tt.wantIs != nil || tt.wantText != ""
			if !wantError {
				if first != nil {
					t.Errorf("error %v, want none", first)
				}
				return
			}
			if first == nil {
				t.Fatal("no error, want one")
			}
			if tt.wantStatus != 0 {
				var status *statusError
				if !errors.As(first, &status) || status.Status != tt.wantStatus {
					t.Errorf("error %v, want a status %d", first, tt.wantStatus)
				}
			}
			if tt.wantIs != nil && !errors.Is(first, tt.wantIs) {
				t.Errorf("error %v, want one wrapping %v", first, tt.wantIs)
			}
			if !strings.Contains(first.Error(), tt.wantText) {
				t.Errorf("error %q, want it to hold %q", first, tt.wantText)
			}
		})
	}
}

// keepFirst keeps the first error seen.
func keepFirst(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// TestOrderClientConcurrentCallers checks that concurrent callers each get a
// connection of their own and every order still reaches the server intact.
func TestOrderClientConcurrentCallers(t *testing.T) {
	keys := []string{"key-a", "key-b"}
	server, conns := loadServer(t, acceptOrder(keys, "c-"))
	client := newOrderClient(server.URL+"/v1/orders", keys, "c-", 4)
	t.Cleanup(client.close)
	const callers, each = 4, 25
	errs := make(chan error, callers*each)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range each {
				errs <- client.place(context.Background())
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("place: %v", err)
		}
	}
	if got := conns.Load(); got < 1 || got > callers {
		t.Errorf("the server saw %d connections for %d callers", got, callers)
	}
}

// cannedServer answers every request on loopback with the same 202, doing as
// little as it can, so a benchmark against it weighs the client.
func cannedServer(b *testing.B) string {
	b.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { listener.Close() })
	answer := append([]byte(nil), "HTTP/1.1 202 Accepted\r\nContent-Type: application/json\r\nContent-Length: 38\r\n\r\n"...)
	answer = append(answer, `{"id":"ord-000001","status":"pending"}`...)
	go func() {
		for {
			conn, err := listener.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				reader := bufio.NewReader(conn)
				for {
					length := 0
					for {
						line, err := reader.ReadSlice('\n')
						if err != nil {
							return
						}
						if len(line) <= 2 {
							break
						}
						if value, found := bytes.CutPrefix(line, []byte("Content-Length: ")); found {
							length, _ = parseDecimal(bytes.TrimSpace(value))
						}
					}
					if _, err := reader.Discard(length); err != nil {
						return
					}
					if _, err := conn.Write(answer); err != nil {
						return
					}
				}
			}()
		}
	}()
	return "http://" + listener.Addr().String() + "/v1/orders"
}

// netHTTPPlace is the order request as net/http's client sends it: the
// reference the lean client is weighed against.
func netHTTPPlace(client *http.Client, url string, keys []string, seq *atomic.Int64) error {
	n := seq.Add(1)
	body := `{"client_order_id":"b-` + strconv.FormatInt(n, 10) +
		`","symbol":"BTC-USD","side":"buy","type":"limit","quantity":"0.01000","price":"50000.00"}`
	request, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	request.Header.Set("Authorization", "Bearer "+keys[n%int64(len(keys))])
	request.Header.Set("Content-Type", "application/json")
	response, err := client.Do(request)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, response.Body)
	response.Body.Close()
	if response.StatusCode != http.StatusAccepted {
		return fmt.Errorf("answered %d", response.StatusCode)
	}
	return nil
}

// BenchmarkOrderClient weighs one order request, client and a minimal server
// together, with the lean client and with net/http's.
func BenchmarkOrderClient(b *testing.B) {
	keys := []string{"key-a", "key-b", "key-c"}
	url := cannedServer(b)
	b.Run("lean", func(b *testing.B) {
		client := newOrderClient(url, keys, "b-", 64)
		b.Cleanup(client.close)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := client.place(context.Background()); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("net/http", func(b *testing.B) {
		transport := http.DefaultTransport.(*http.Transport).Clone()
		transport.MaxIdleConnsPerHost = 64
		client := &http.Client{Transport: transport}
		b.Cleanup(transport.CloseIdleConnections)
		var seq atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := netHTTPPlace(client, url, keys, &seq); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
