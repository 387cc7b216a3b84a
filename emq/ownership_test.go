package emq_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/lua"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestOwnershipMoves walks one queue's ownership lease through its moves,
// each step checked against the lease as the server then holds it.
func TestOwnershipMoves(t *testing.T) {
	ctx := context.Background()
	queue, _ := newQueue(t)
	ownership := queue.Ownership()
	const long = 10 * time.Second
	type owner struct {
		holder string
		token  int64
		held   bool
	}
	steps := []struct {
		name   string
		op     string // acquire, extend, release, wait
		holder string
		token  int64 // extend, release
		floor  int64 // acquire
		lease  time.Duration
		// wantToken and wantAcquired for acquire; wantStale for extend.
		wantToken    int64
		wantAcquired bool
		wantStale    bool
		want         owner
	}{
		{name: "a takes the free lease", op: "acquire", holder: "a", lease: long,
			wantToken: 1, wantAcquired: true, want: owner{"a", 1, true}},
		{name: "b is refused while a holds it", op: "acquire", holder: "b", lease: long,
			want: owner{"a", 1, true}},
		{name: "b cannot extend a's lease", op: "extend", holder: "b", token: 1, lease: long,
			wantStale: true, want: owner{"a", 1, true}},
		{name: "a cannot extend under a token it was not given", op: "extend", holder: "a", token: 2, lease: long,
			wantStale: true, want: owner{"a", 1, true}},
		{name: "a extends its lease", op: "extend", holder: "a", token: 1, lease: long,
			want: owner{"a", 1, true}},
		{name: "b's release changes nothing", op: "release", holder: "b", token: 1,
			want: owner{"a", 1, true}},
		{name: "a taking its own lease again gets a new token", op: "acquire", holder: "a", lease: long,
			wantToken: 2, wantAcquired: true, want: owner{"a", 2, true}},
		{name: "a's first token is stale", op: "extend", holder: "a", token: 1, lease: long,
			wantStale: true, want: owner{"a", 2, true}},
		{name: "a's release under its first token changes nothing", op: "release", holder: "a", token: 1,
			want: owner{"a", 2, true}},
		{name: "a releases it", op: "release", holder: "a", token: 2,
			want: owner{"", 2, false}},
		{name: "a second release is harmless", op: "release", holder: "a", token: 2,
			want: owner{"", 2, false}},
		{name: "a released token is stale", op: "extend", holder: "a", token: 2, lease: long,
			wantStale: true, want: owner{"", 2, false}},
		{name: "b takes it for a moment, above every earlier token", op: "acquire", holder: "b", lease: 300 * time.Millisecond,
			wantToken: 3, wantAcquired: true, want: owner{"b", 3, true}},
		{name: "a is refused before b's deadline", op: "acquire", holder: "a", lease: long,
			want: owner{"b", 3, true}},
		{name: "b's deadline passes by the server's clock", op: "wait", lease: 400 * time.Millisecond,
			want: owner{"b", 3, false}},
		{name: "b cannot extend an expired lease that nobody took", op: "extend", holder: "b", token: 3, lease: long,
			wantStale: true, want: owner{"b", 3, false}},
		{name: "a takes the expired lease", op: "acquire", holder: "a", lease: long,
			wantToken: 4, wantAcquired: true, want: owner{"a", 4, true}},
		{name: "a floor does not take a held lease", op: "acquire", holder: "b", floor: 10, lease: long,
			want: owner{"a", 4, true}},
		{name: "a releases it again", op: "release", holder: "a", token: 4,
			want: owner{"", 4, false}},
		{name: "b asks for a token above 10", op: "acquire", holder: "b", floor: 10, lease: long,
			wantToken: 11, wantAcquired: true, want: owner{"b", 11, true}},
		{name: "a floor below the counter changes nothing", op: "acquire", holder: "b", floor: 5, lease: long,
			wantToken: 12, wantAcquired: true, want: owner{"b", 12, true}},
	}
	for _, step := range steps {
		before := time.Now()
		switch step.op {
		case "acquire":
			token, acquired, err := ownership.AcquireAbove(ctx, step.holder, step.lease, step.floor)
			if err != nil || token != step.wantToken || acquired != step.wantAcquired {
				t.Fatalf("%s: acquire = %d, %v, %v; want %d, %v", step.name, token, acquired, err, step.wantToken, step.wantAcquired)
			}
		case "extend":
			deadline, err := ownership.Extend(ctx, step.holder, step.token, step.lease)
			if stale := errors.Is(err, emq.ErrStale); stale != step.wantStale || (err != nil && !stale) {
				t.Fatalf("%s: extend = %v; want stale %v", step.name, err, step.wantStale)
			}
			if err == nil && deadline.Before(before.Add(step.lease-time.Second)) {
				t.Fatalf("%s: extended to %v, want about %v from %v", step.name, deadline, step.lease, before)
			}
		case "release":
			if err := ownership.Release(ctx, step.holder, step.token); err != nil {
				t.Fatalf("%s: release = %v", step.name, err)
			}
		case "wait":
			time.Sleep(step.lease)
		}
		state, err := ownership.Owner(ctx)
		if err != nil {
			t.Fatalf("%s: owner: %v", step.name, err)
		}
		if got := (owner{state.Holder, state.Token, state.Held}); got != step.want {
			t.Fatalf("%s: owner = %+v, want %+v", step.name, got, step.want)
		}
		if state.Holder != "" && (state.Deadline.IsZero() || state.Since.IsZero() || state.Since.After(state.Deadline)) {
			t.Fatalf("%s: owner = %+v, want since before the deadline", step.name, state)
		}
	}
}

// TestOwnershipRefusesBadArguments: no holder, or a lease too short to keep.
func TestOwnershipRefusesBadArguments(t *testing.T) {
	testserver.Parallel(t)
	queue, _ := newQueue(t)
	ownership := queue.Ownership()
	tests := []struct {
		name   string
		holder string
		lease  time.Duration
	}{
		{"no holder", "", time.Second},
		{"no lease", "a", 0},
		{"a lease under the minimum", "a", time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := ownership.Acquire(context.Background(), tt.holder, tt.lease); err == nil {
				t.Error("acquire: no error")
			}
			if _, err := ownership.Extend(context.Background(), tt.holder, 1, tt.lease); err == nil || errors.Is(err, emq.ErrStale) {
				t.Errorf("extend = %v, want a refusal that is not ErrStale", err)
			}
		})
	}
}

// TestOwnershipTokenOnlyRises: whoever takes the lease, after a release or
// an expiry, gets a token above every earlier one, on every queue alone.
func TestOwnershipTokenOnlyRises(t *testing.T) {
	ctx := context.Background()
	queue, rdb := newQueue(t)
	client, err := emq.Connect(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	other := client.Queue("other")
	var last int64
	for round := range 30 {
		holder := fmt.Sprintf("h%d", round%3)
		token, acquired, err := queue.Ownership().Acquire(ctx, holder, 50*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if !acquired {
			// The last holder's lease runs out by the server's clock.
			time.Sleep(60 * time.Millisecond)
			if token, acquired, err = queue.Ownership().Acquire(ctx, holder, 50*time.Millisecond); err != nil || !acquired {
				t.Fatalf("round %d: acquire after the expiry = %v, %v", round, acquired, err)
			}
		}
		if token <= last {
			t.Fatalf("round %d: token %d after %d", round, token, last)
		}
		last = token
		if round%2 == 0 {
			if err := queue.Ownership().Release(ctx, holder, token); err != nil {
				t.Fatal(err)
			}
		}
	}
	if token, acquired, err := other.Ownership().Acquire(ctx, "h0", time.Second); err != nil || !acquired || token != 1 {
		t.Errorf("another queue's first acquisition = %d, %v, %v; want token 1", token, acquired, err)
	}
}

// TestOwnershipRacingAcquirersOneWins: of many holders taking a free lease
// at once, exactly one gets it.
func TestOwnershipRacingAcquirersOneWins(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	_, rdb := newQueue(t)
	client, err := emq.Connect(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	const racers, rounds = 12, 20
	for round := range rounds {
		ownership := client.Queue(fmt.Sprintf("race-%d", round)).Ownership()
		start := make(chan struct{})
		var wg sync.WaitGroup
		var mu sync.Mutex
		var winners []string
		var tokens []int64
		for racer := range racers {
			wg.Go(func() {
				<-start
				holder := fmt.Sprintf("racer-%d", racer)
				token, acquired, err := ownership.Acquire(ctx, holder, time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				if acquired {
					mu.Lock()
					winners, tokens = append(winners, holder), append(tokens, token)
					mu.Unlock()
				}
			})
		}
		close(start)
		wg.Wait()
		if len(winners) != 1 || tokens[0] != 1 {
			t.Fatalf("round %d: winners %v with tokens %v; want one, with token 1", round, winners, tokens)
		}
		if state, err := ownership.Owner(ctx); err != nil || state.Holder != winners[0] || state.Token != 1 {
			t.Fatalf("round %d: owner = %+v, %v; want %s", round, state, err, winners[0])
		}
	}
}

// TestHeldKeepsItsLease: a held lease outlives its lease many times over,
// under one token, until it is released; the release ends its context.
func TestHeldKeepsItsLease(t *testing.T) {
	ctx := context.Background()
	queue, _ := newQueue(t)
	logger, _ := workerLogger(t)
	const lease = time.Second
	held, acquired, err := queue.Ownership().Hold(ctx, "keeper", emq.HoldOptions{Lease: lease, Logger: logger})
	if err != nil || !acquired {
		t.Fatalf("hold = %v, %v", acquired, err)
	}
	t.Cleanup(func() { _ = held.Release(context.Background()) })
	if _, again, err := queue.Ownership().Hold(ctx, "another", emq.HoldOptions{Lease: lease}); err != nil || again {
		t.Fatalf("a second holder's hold = %v, %v; want refused", again, err)
	}
	time.Sleep(3 * lease)
	if err := held.Context().Err(); err != nil {
		t.Fatalf("the held lease ended: %v", context.Cause(held.Context()))
	}
	state, err := queue.Ownership().Owner(ctx)
	if err != nil || !state.Held || state.Holder != "keeper" || state.Token != held.Token() {
		t.Fatalf("owner = %+v, %v; want keeper under token %d", state, err, held.Token())
	}
	// The local deadline is at least the margin before the server's.
	if margin := state.Deadline.Sub(held.Deadline()); margin < lease/10-5*time.Millisecond {
		t.Errorf("the local deadline is %v before the server's; want at least the margin %v", margin, lease/10)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if cause := context.Cause(held.Context()); !errors.Is(cause, emq.ErrReleased) {
		t.Errorf("cause = %v, want ErrReleased", cause)
	}
	if state, err := queue.Ownership().Owner(ctx); err != nil || state.Held || state.Token != held.Token() {
		t.Errorf("owner after the release = %+v, %v; want free, the token kept", state, err)
	}
}

// TestHeldReportsALostLease: the holder hears at once when an extension is
// refused, and at its local deadline, ahead of the server's, when no
// extension comes through.
func TestHeldReportsALostLease(t *testing.T) {
	const lease = 600 * time.Millisecond
	tests := []struct {
		name string
		// single needs a server of its own to stop.
		single bool
		// lose takes the lease away.
		lose      func(t *testing.T, ownership *emq.Ownership, server *testserver.Redis)
		wantStale bool
		// within bounds the time from losing the lease to the report.
		within time.Duration
	}{
		{
			name: "taken under a newer token",
			lose: func(t *testing.T, ownership *emq.Ownership, _ *testserver.Redis) {
				// The same holder name from another process: its
				// acquisition fences the first.
				if _, acquired, err := ownership.Acquire(context.Background(), "keeper", time.Minute); err != nil || !acquired {
					t.Fatalf("acquire = %v, %v", acquired, err)
				}
			},
			wantStale: true,
			within:    lease/3 + 300*time.Millisecond,
		},
		{
			name: "released under its token by another path",
			lose: func(t *testing.T, ownership *emq.Ownership, _ *testserver.Redis) {
				if err := ownership.Release(context.Background(), "keeper", 1); err != nil {
					t.Fatal(err)
				}
			},
			wantStale: true,
			within:    lease/3 + 300*time.Millisecond,
		},
		{
			name:   "the server is unreachable",
			single: true,
			lose: func(t *testing.T, _ *emq.Ownership, server *testserver.Redis) {
				server.Stop(t)
			},
			within: lease,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var queue *emq.Queue
			var server *testserver.Redis
			if tt.single {
				if testserver.ClusterMode() {
					t.Skip("stops its server, which the shared cluster cannot do")
				}
				server = testserver.StartRedis(t)
				queue, _ = queueOn(t, quickToGiveUp(t, server))
			} else {
				queue, _ = newQueue(t)
			}
			logger, _ := workerLogger(t)
			held, acquired, err := queue.Ownership().Hold(context.Background(), "keeper", emq.HoldOptions{Lease: lease, Logger: logger})
			if err != nil || !acquired || held.Token() != 1 {
				t.Fatalf("hold = %v, %v", acquired, err)
			}
			lostAt := time.Now()
			tt.lose(t, queue.Ownership(), server)
			select {
			case <-held.Context().Done():
			case <-time.After(tt.within + 5*time.Second):
				t.Fatal("the loss was never reported")
			}
			reportedAt := time.Now()
			if took := reportedAt.Sub(lostAt); took > tt.within {
				t.Errorf("reported %v after the loss; want within %v", took, tt.within)
			}
			cause := context.Cause(held.Context())
			if !errors.Is(cause, emq.ErrLeaseLost) || errors.Is(cause, emq.ErrStale) != tt.wantStale {
				t.Errorf("cause = %v; want ErrLeaseLost, stale %v", cause, tt.wantStale)
			}
			if !tt.wantStale && reportedAt.Before(held.Deadline()) {
				// Lost on the holder's own clock, at the local deadline
				// its last extension set (TestHeldKeepsItsLease checks
				// that it is ahead of the server's by the margin).
				t.Errorf("reported at %v, before the local deadline %v", reportedAt, held.Deadline())
			}
			if err := held.Release(context.Background()); err != nil && !tt.single {
				t.Errorf("release of a lost lease = %v, want nil", err)
			}
		})
	}
}

// TestOwnershipMovesAreSentAgainAfterALostReply: every ownership script is
// repeatable (emq/scripts.go), so go-redis sends it again when its reply is
// lost, and the second run's answer is the truth: an acquisition answers a
// newer token, which is the lease's (the first run's token nobody learned).
func TestOwnershipMovesAreSentAgainAfterALostReply(t *testing.T) {
	testserver.Parallel(t)
	const holder = "keeper"
	tests := []struct {
		name   string
		script string
		// run makes the move whose reply is lost, on a lease holder holds
		// under token 1.
		run  func(ctx context.Context, ownership *emq.Ownership) error
		want emq.OwnerState
	}{
		{
			name:   "acquire",
			script: lua.OwnershipAcquire,
			run: func(ctx context.Context, ownership *emq.Ownership) error {
				token, acquired, err := ownership.Acquire(ctx, holder, time.Minute)
				if err == nil && (!acquired || token != 3) {
					return fmt.Errorf("acquire = %d, %v; want token 3: the second of two runs", token, acquired)
				}
				return err
			},
			want: emq.OwnerState{Holder: holder, Token: 3, Held: true},
		},
		{
			name:   "extend",
			script: lua.OwnershipExtend,
			run: func(ctx context.Context, ownership *emq.Ownership) error {
				_, err := ownership.Extend(ctx, holder, 1, time.Minute)
				return err
			},
			want: emq.OwnerState{Holder: holder, Token: 1, Held: true},
		},
		{
			name:   "release",
			script: lua.OwnershipRelease,
			run: func(ctx context.Context, ownership *emq.Ownership) error {
				return ownership.Release(ctx, holder, 1)
			},
			want: emq.OwnerState{Token: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			queue, proxy, direct := proxiedQueue(t)
			if err := direct.ScriptLoad(ctx, tt.script).Err(); err != nil {
				t.Fatal(err)
			}
			ownership := queue.Ownership()
			if _, acquired, err := ownership.Acquire(ctx, holder, time.Minute); err != nil || !acquired {
				t.Fatalf("acquire = %v, %v", acquired, err)
			}
			fault := proxy.DropReply(sha(tt.script))
			if err := tt.run(ctx, ownership); err != nil {
				t.Fatalf("%s = %v; want it sent again and answered", tt.name, err)
			}
			if n := fault.Seen(); n != 2 {
				t.Errorf("%s was sent %d times; want twice", tt.name, n)
			}
			state, err := ownership.Owner(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := (emq.OwnerState{Holder: state.Holder, Token: state.Token, Held: state.Held}); got != tt.want {
				t.Errorf("owner = %+v, want %+v", got, tt.want)
			}
		})
	}
}
