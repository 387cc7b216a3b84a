package emq_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ordergate/ordergate/emq"
)

// TestWorkerDrains: cancelling Work lets in-flight jobs finish; those that
// outrun the drain timeout are cancelled and released, claimable at once,
// and Work returns within the drain timeout leaving nothing active.
func TestWorkerDrains(t *testing.T) {
	const drainTimeout = time.Second
	tests := []struct {
		name     string
		payloads []string
		// wantDone are the indexes of payloads that complete; the others are
		// released.
		wantDone []int
		// wantCause is the cancel cause a released job's handler sees; nil
		// for a handler that ignores its context.
		wantCause error
	}{
		{name: "in-flight jobs finish", payloads: repeated("sleep=300ms", 4), wantDone: []int{0, 1, 2, 3}},
		{
			name:      "jobs outrunning the drain timeout are released",
			payloads:  []string{"sleep=200ms", "sleep=1m", "sleep=200ms", "sleep=1m"},
			wantDone:  []int{0, 2},
			wantCause: emq.ErrDrainTimeout,
		},
		{
			name:     "a handler ignoring its context is released all the same",
			payloads: []string{"stubborn=1500ms", "sleep=100ms"},
			wantDone: []int{1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			queue, rdb := newQueue(t)
			ids := admitPayloads(t, queue, "drain", tt.payloads...)
			started := make(chan emq.Claim, len(ids))
			causes := make(chan error, len(ids))
			done := &completions{}
			logger, _ := workerLogger(t)
			worker := startWorker(t, queue, payloadHandler(started, causes), emq.WorkerOptions{
				Concurrency: len(ids), Lease: 5 * time.Second, DrainTimeout: drainTimeout,
				Logger: logger, OnComplete: done.record,
			})
			for range ids {
				select {
				case <-started:
				case <-time.After(5 * time.Second):
					t.Fatal("not every handler started")
				}
			}

			took, err := worker.stop(t)
			if err != nil {
				t.Fatalf("Work = %v, want nil after a drain that released everything", err)
			}
			if limit := drainTimeout + 300*time.Millisecond; took > limit {
				t.Errorf("Work returned %s after cancellation; want within the drain timeout (%s + slack)", took, drainTimeout)
			}
			t.Logf("Work returned %s after cancellation", took)
			if sizes := queueSizes(t, rdb, queue); sizes["active"] != 0 {
				t.Errorf("%d jobs left active after the drain", sizes["active"])
			}
			finishing := make(map[int]bool)
			for _, i := range tt.wantDone {
				finishing[i] = true
			}
			var released []string
			for i, id := range ids {
				info := readJob(t, queue, id)
				switch {
				case finishing[i] && (info.State != emq.StateDone || done.of(id) != 1):
					t.Errorf("%s (%s) is %s with %d completions, want done once", id, tt.payloads[i], info.State, done.of(id))
				case !finishing[i] && info.State != emq.StatePending:
					t.Errorf("%s (%s) is %s, want released to pending", id, tt.payloads[i], info.State)
				case !finishing[i]:
					released = append(released, id)
				}
			}
			if tt.wantCause != nil {
				for range released {
					if cause := <-causes; !errors.Is(cause, tt.wantCause) {
						t.Errorf("released handler's cancel cause = %v, want %v", cause, tt.wantCause)
					}
				}
			}
			// Released means claimable at once, long before the 5s lease would
			// have run out.
			claims, err := queue.Claim(context.Background(), len(ids), time.Minute)
			if err != nil || len(claims) != len(released) {
				t.Fatalf("claimed %d released jobs (%v), want %d", len(claims), err, len(released))
			}
			if len(released) < len(ids) && tt.wantCause == nil {
				// The stubborn handler returns later; its nil must not complete
				// the job someone else holds now.
				time.Sleep(time.Second)
				for _, claim := range claims {
					if n := done.of(claim.ID); n != 0 {
						t.Errorf("%s completed %d times by the stopped worker after its release", claim.ID, n)
					}
				}
			}
		})
	}
}

// A drain woken past its reserve, as on a host too loaded to run it, still
// releases the jobs it stopped, returning that much later, rather than
// leave them leased for a whole lease.
func TestADrainWokenLateStillReleases(t *testing.T) {
	const drainTimeout, stall = time.Second, 600 * time.Millisecond
	queue, rdb := newQueue(t)
	ids := admitPayloads(t, queue, "drain", "sleep=1m")
	started := make(chan emq.Claim, 1)
	logger, _ := workerLogger(t)
	// The drain logs its warning when its patience runs out, before it
	// cancels and releases: holding that line wakes the rest late.
	logger = slog.New(stallingHandler{Handler: logger.Handler(), message: "drain timeout", stall: stall})
	worker := startWorker(t, queue, payloadHandler(started, make(chan error, 1)), emq.WorkerOptions{
		Concurrency: 1, Lease: 5 * time.Second, DrainTimeout: drainTimeout, Logger: logger,
	})
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("the handler did not start")
	}

	took, err := worker.stop(t)
	if err != nil {
		t.Fatalf("Work = %v after %s, want nil: the late drain released its job", err, took)
	}
	if took < drainTimeout {
		t.Errorf("Work returned %s after cancellation, before the stalled drain could", took)
	}
	if info := readJob(t, queue, ids[0]); info.State != emq.StatePending {
		t.Errorf("the stopped job is %s, want released to pending", info.State)
	}
	if sizes := queueSizes(t, rdb, queue); sizes["active"] != 0 {
		t.Errorf("%d jobs left active after the drain", sizes["active"])
	}
}

// stallingHandler holds each record whose message starts with message for
// stall before passing it on.
type stallingHandler struct {
	slog.Handler
	message string
	stall   time.Duration
}

func (h stallingHandler) Handle(ctx context.Context, record slog.Record) error {
	if strings.HasPrefix(record.Message, h.message) {
		time.Sleep(h.stall)
	}
	return h.Handler.Handle(ctx, record)
}

func (h stallingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return stallingHandler{Handler: h.Handler.WithAttrs(attrs), message: h.message, stall: h.stall}
}

func (h stallingHandler) WithGroup(name string) slog.Handler {
	return stallingHandler{Handler: h.Handler.WithGroup(name), message: h.message, stall: h.stall}
}
