package emq_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/lua"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// labeled is a job of group whose payload is a JSON object with the member
// "s" = label (no member when label is empty).
func labeled(id, group, label string) emq.Job {
	payload := `{"n":"` + id + `"}`
	if label != "" {
		payload = `{"n":"` + id + `","s":"` + label + `"}`
	}
	return emq.Job{ID: id, Kind: "test.job", Group: group, Payload: []byte(payload), Fingerprint: "fp-" + id}
}

// Where a job is put by placeJobs.
const (
	inLane    = "lane"
	inDelayed = "delayed"  // claimed, then retried with an hour's backoff
	inFront   = "front"    // claimed, then released by a draining worker
	inActive  = "active"   // claimed and held
	inDead    = "dead"     // claimed, then buried
	inDone    = "done"     // claimed, then completed
	inOther   = "canceled" // canceled by id
)

// placed is a job placeJobs made, where it put it.
type placed struct {
	job   emq.Job
	where string
}

// placeJobs admits the jobs and moves each where it says: the ones to move
// first (admitted, claimed and moved before any lane job is admitted, so a
// claim takes exactly them), then the lane jobs.
func placeJobs(t testing.TB, queue *emq.Queue, jobs []placed) {
	t.Helper()
	ctx := context.Background()
	where := map[string]string{}
	moved := 0
	for _, p := range jobs {
		where[p.job.ID] = p.where
		if p.where != inLane && p.where != inOther {
			if _, err := queue.Admit(ctx, p.job); err != nil {
				t.Fatal(err)
			}
			moved++
		}
	}
	later := emq.RetryPolicy{MaxAttempts: 10, BaseDelay: time.Hour, MaxDelay: time.Hour}
	for moved > 0 {
		claims, err := queue.Claim(ctx, moved, time.Hour)
		if err != nil || len(claims) == 0 {
			t.Fatalf("claim: %d jobs, %v", len(claims), err)
		}
		moved -= len(claims)
		for _, c := range claims {
			switch where[c.ID] {
			case inDelayed:
				_, err = queue.Retry(ctx, c.ID, c.Token, errors.New("later"), later)
			case inFront:
				err = queue.Release(ctx, c.ID, c.Token)
			case inDead:
				err = queue.Bury(ctx, c.ID, c.Token, errors.New("never"))
			case inDone:
				err = queue.Complete(ctx, c.ID, c.Token)
			}
			if err != nil {
				t.Fatalf("move %s to %s: %v", c.ID, where[c.ID], err)
			}
		}
	}
	for _, p := range jobs {
		if p.where == inLane || p.where == inOther {
			if _, err := queue.Admit(ctx, p.job); err != nil {
				t.Fatal(err)
			}
		}
		if p.where == inOther {
			if err := queue.Cancel(ctx, p.job.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// bookkeeper is what both testing.TB and *rapid.T offer checkLaneBookkeeping.
type bookkeeper interface {
	failer
	Errorf(format string, args ...any)
}

// checkLaneBookkeeping holds the invariants the lane structures keep: a
// group is in the rotation exactly while its lane holds jobs, the lanes hash
// counts each group's pending jobs in its lane and on the front list, and
// every id listed is a pending job of the lane's group.
func checkLaneBookkeeping(t bookkeeper, rdb redis.UniversalClient, queue *emq.Queue) {
	t.Helper()
	ctx := context.Background()
	rotation, err := rdb.ZRange(ctx, queue.Key("rotation"), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	counts, err := rdb.HGetAll(ctx, queue.Key("lanes")).Result()
	if err != nil {
		t.Fatal(err)
	}
	front, err := rdb.LRange(ctx, queue.Key("front"), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{}
	listed := func(id, group string) {
		info, err := queue.Job(ctx, id)
		if err != nil || info.State != emq.StatePending || (group != "" && info.Group != group) {
			t.Errorf("listed %s (lane %q) is %+v, %v; want a pending job of the lane's group", id, group, info, err)
			return
		}
		want[info.Group]++
	}
	for _, id := range front {
		listed(id, "")
	}
	groups := map[string]bool{}
	for group := range counts {
		groups[group] = true
	}
	for _, group := range rotation {
		groups[group] = true
	}
	for group := range groups {
		lane, err := rdb.LRange(ctx, queue.Key("lane:"+group), 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		if inRotation := slices.Contains(rotation, group); inRotation != (len(lane) > 0) {
			t.Errorf("group %s: in the rotation %v with %d jobs in its lane", group, inRotation, len(lane))
		}
		for _, id := range lane {
			listed(id, group)
		}
	}
	for group := range groups {
		if got := counts[group]; got != fmt.Sprint(want[group]) && !(got == "" && want[group] == 0) {
			t.Errorf("lanes counts %q pending jobs of %s; the lists hold %d", got, group, want[group])
		}
	}
}

// TestCancelGroupWithdrawsEveryWaitingJob: every job of the group that no
// worker holds, in its lane, delayed or on the front list, is withdrawn and
// answered once, with or without a payload member to match, whatever the
// bound per run; active, dead and finished jobs and other groups' stay.
func TestCancelGroupWithdrawsEveryWaitingJob(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		only   *emq.PayloadMember
		perRun int
	}{
		{"every job, one entry per run", nil, 1},
		{"every job, 3 entries per run", nil, 3},
		{"every job, one run", nil, 500},
		{"label x, one entry per run", &emq.PayloadMember{Name: "s", Value: "x"}, 1},
		{"label x, 4 entries per run", &emq.PayloadMember{Name: "s", Value: "x"}, 4},
		{"label x, one run", &emq.PayloadMember{Name: "s", Value: "x"}, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			queue, rdb := newQueue(t)
			var jobs []placed
			wanted := map[string]bool{}
			n := 0
			for _, where := range []string{inLane, inDelayed, inFront, inActive, inDead, inDone, inOther} {
				for _, group := range []string{"g", "h"} {
					for _, label := range []string{"x", "y", ""} {
						for range 3 {
							id := fmt.Sprintf("%s-%s-%s-%03d", group, where, label, n)
							n++
							jobs = append(jobs, placed{labeled(id, group, label), where})
							waiting := where == inLane || where == inDelayed || where == inFront
							if group == "g" && waiting && (tc.only == nil || label == "x") {
								wanted[id] = true
							}
						}
					}
				}
			}
			// Payloads the member cannot match: not JSON, not an object,
			// the member a number.
			for i, payload := range []string{`not json`, `["s","x"]`, `{"s":1}`, `"x"`, ``} {
				id := fmt.Sprintf("g-odd-%d", i)
				jobs = append(jobs, placed{emq.Job{ID: id, Kind: "test.job", Group: "g", Payload: []byte(payload)}, inLane})
				if tc.only == nil {
					wanted[id] = true
				}
			}
			rand.New(rand.NewPCG(1, 2)).Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
			placeJobs(t, queue, jobs)
			before := map[string]emq.JobInfo{}
			for _, p := range jobs {
				before[p.job.ID] = readJob(t, queue, p.job.ID)
			}

			runs := 0
			finished := func() int64 {
				n, err := rdb.ZCard(ctx, queue.Key("done")).Result()
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
			last := finished()
			canceled, err := queue.CancelGroupIn(ctx, "g", tc.only, tc.perRun, func(cursor string) error {
				runs++
				if now := finished(); now-last > int64(tc.perRun) {
					t.Errorf("run %d withdrew %d jobs, more than the %d entries it may look at", runs, now-last, tc.perRun)
				} else {
					last = now
				}
				checkLaneBookkeeping(t, rdb, queue)
				return nil
			})
			if err != nil {
				t.Fatalf("cancel group: %v", err)
			}
			runs++
			got := map[string]bool{}
			for _, job := range canceled {
				if got[job.ID] {
					t.Errorf("%s answered twice", job.ID)
				}
				got[job.ID] = true
				if job.State != emq.StateCanceled || job.Finished.IsZero() || job.Group != "g" ||
					string(job.Payload) != string(before[job.ID].Payload) || job.Attempts != before[job.ID].Attempts {
					t.Errorf("answered %+v; want the canceled record of %+v", job, before[job.ID])
				}
			}
			if !maps.Equal(got, wanted) {
				t.Errorf("withdrew %d jobs, want %d: extra %v, missing %v", len(got), len(wanted), missing(wanted, got), missing(got, wanted))
			}
			for _, p := range jobs {
				info := readJob(t, queue, p.job.ID)
				if wanted[p.job.ID] {
					if info.State != emq.StateCanceled {
						t.Errorf("%s (%s) is %s, want canceled", p.job.ID, p.where, info.State)
					}
				} else if info.State != before[p.job.ID].State {
					t.Errorf("%s (%s) is %s, was %s", p.job.ID, p.where, info.State, before[p.job.ID].State)
				}
			}
			// The entries looked at: every delayed job, the front list, g's
			// lane, at most perRun a run.
			entries := 0
			for _, p := range jobs {
				if p.where == inDelayed || p.where == inFront || (p.where == inLane && p.job.Group == "g") {
					entries++
				}
			}
			if least := (entries + tc.perRun - 1) / tc.perRun; runs < least {
				t.Errorf("%d runs looked at %d entries, %d at most each", runs, entries, tc.perRun)
			}
			checkLaneBookkeeping(t, rdb, queue)
			again, err := queue.CancelGroup(ctx, "g", tc.only)
			if err != nil || len(again) != 0 {
				t.Errorf("a second cancel withdrew %d jobs, %v; want none", len(again), err)
			}
		})
	}
}

// missing lists the keys of a that b lacks, sorted.
func missing(a, b map[string]bool) []string {
	var ids []string
	for id := range a {
		if !b[id] {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// TestCancelGroupFollowsJobsThatMoveBetweenRuns: between runs, workers claim
// and complete, release and retry jobs, the promoter moves delayed jobs to
// the lanes, jobs are admitted and canceled by id. Every job of the group
// that no worker held from the first run to the last is withdrawn, none
// twice, and the lanes stay consistent after every run.
func TestCancelGroupFollowsJobsThatMoveBetweenRuns(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	for seed := range uint64(8) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			queue, rdb := newQueue(t)
			r := rand.New(rand.NewPCG(seed, 23))
			var jobs []placed
			for i := range 120 {
				group := []string{"g", "g", "h", "k"}[r.IntN(4)]
				where := []string{inLane, inLane, inDelayed, inFront, inActive}[r.IntN(5)]
				jobs = append(jobs, placed{labeled(fmt.Sprintf("%s-%03d", group, i), group, ""), where})
			}
			placeJobs(t, queue, jobs)
			// A job of g a worker holds at any moment may be left alone.
			held := map[string]bool{}
			for _, p := range jobs {
				if p.where == inActive {
					held[p.job.ID] = true
				}
			}
			var claimed []emq.Claim
			admitted := 0
			later := emq.RetryPolicy{MaxAttempts: 10, BaseDelay: time.Hour, MaxDelay: time.Hour}
			canceled, err := queue.CancelGroupIn(ctx, "g", nil, 1+r.IntN(6), func(cursor string) error {
				switch r.IntN(7) {
				case 0: // a worker claims a few
					claims, err := queue.Claim(ctx, 1+r.IntN(3), time.Hour)
					if err != nil {
						return err
					}
					for _, c := range claims {
						held[c.ID] = true
					}
					claimed = append(claimed, claims...)
				case 1: // and hands one back, retries or finishes it
					if len(claimed) == 0 {
						return nil
					}
					c := claimed[0]
					claimed = claimed[1:]
					switch r.IntN(3) {
					case 0:
						return queue.Release(ctx, c.ID, c.Token)
					case 1:
						_, err := queue.Retry(ctx, c.ID, c.Token, errors.New("again"), later)
						return err
					default:
						return queue.Complete(ctx, c.ID, c.Token)
					}
				case 2: // the backoff of every delayed job passes, and the promoter runs
					delayed, err := rdb.ZRange(ctx, queue.Key("delayed"), 0, -1).Result()
					if err != nil {
						return err
					}
					for _, id := range delayed {
						rdb.ZAdd(ctx, queue.Key("delayed"), redis.Z{Score: 0, Member: id})
					}
					_, err = queue.Promote(ctx, 1000)
					return err
				case 3: // new jobs, which may or may not be withdrawn
					for _, group := range []string{"g", "h"} {
						admitted++
						if _, err := queue.Admit(ctx, labeled(fmt.Sprintf("%s-new-%03d", group, admitted), group, "")); err != nil {
							return err
						}
					}
				case 4: // another group's job canceled by id
					for _, p := range jobs {
						if p.job.Group != "g" && readJob(t, queue, p.job.ID).State == emq.StatePending {
							return queue.Cancel(ctx, p.job.ID)
						}
					}
				}
				checkLaneBookkeeping(t, rdb, queue)
				return nil
			})
			if err != nil {
				t.Fatalf("cancel group: %v", err)
			}
			got := map[string]bool{}
			for _, job := range canceled {
				if got[job.ID] || job.Group != "g" {
					t.Errorf("answered %s of %s (twice: %v)", job.ID, job.Group, got[job.ID])
				}
				got[job.ID] = true
			}
			for _, p := range jobs {
				info := readJob(t, queue, p.job.ID)
				switch {
				case p.job.Group != "g" || held[p.job.ID]:
				case info.State != emq.StateCanceled || !got[p.job.ID]:
					t.Errorf("%s (%s at first, never held) is %s, answered %v; want canceled and answered", p.job.ID, p.where, info.State, got[p.job.ID])
				}
			}
			for id := range got {
				if state := readJob(t, queue, id).State; state != emq.StateCanceled {
					t.Errorf("answered %s, which is %s", id, state)
				}
			}
			checkLaneBookkeeping(t, rdb, queue)
		})
	}
}

// TestCancelGroupKeepsTheRotationAsCancelDoes: withdrawing a group's jobs in
// one call leaves the rotation, the finish tags and the lane counts exactly
// as canceling the same jobs one by one (in the order the call met them)
// does, so the groups take their turns afterwards as they would have.
func TestCancelGroupKeepsTheRotationAsCancelDoes(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	for _, only := range []*emq.PayloadMember{nil, {Name: "s", Value: "x"}} {
		t.Run(fmt.Sprint("filter ", only != nil), func(t *testing.T) {
			_, rdb := newQueue(t)
			client, err := emq.Connect(ctx, rdb)
			if err != nil {
				t.Fatal(err)
			}
			build := func(name string) *emq.Queue {
				queue := client.Queue(name)
				if err := queue.Declare(ctx, "test.job"); err != nil {
					t.Fatal(err)
				}
				r := rand.New(rand.NewPCG(7, 7))
				var jobs []placed
				for i := range 60 {
					group := []string{"g", "g", "h", "k"}[r.IntN(4)]
					where := []string{inLane, inLane, inLane, inDelayed, inFront}[r.IntN(5)]
					jobs = append(jobs, placed{labeled(fmt.Sprintf("%s-%03d", group, i), group, []string{"x", "y"}[r.IntN(2)]), where})
				}
				placeJobs(t, queue, jobs)
				// Some claims first, so the lanes' tags and the clock moved.
				if _, err := queue.Claim(ctx, 5, time.Hour); err != nil {
					t.Fatal(err)
				}
				return queue
			}
			together, oneByOne := build("together"), build("onebyone")
			canceled, err := together.CancelGroupIn(ctx, "g", only, 4, nil)
			if err != nil || len(canceled) == 0 {
				t.Fatalf("cancel group: %d jobs, %v", len(canceled), err)
			}
			for _, job := range canceled {
				if err := oneByOne.Cancel(ctx, job.ID); err != nil {
					t.Fatalf("cancel %s: %v", job.ID, err)
				}
			}
			state := func(queue *emq.Queue) string {
				var b strings.Builder
				rotation, _ := rdb.ZRangeWithScores(ctx, queue.Key("rotation"), 0, -1).Result()
				tags, _ := rdb.HGetAll(ctx, queue.Key("tags")).Result()
				lanes, _ := rdb.HGetAll(ctx, queue.Key("lanes")).Result()
				front, _ := rdb.LRange(ctx, queue.Key("front"), 0, -1).Result()
				fmt.Fprintf(&b, "rotation %v\ntags %v\nlanes %v\nfront %v\n", rotation, tags, lanes, front)
				for _, group := range []string{"g", "h", "k"} {
					lane, _ := rdb.LRange(ctx, queue.Key("lane:"+group), 0, -1).Result()
					fmt.Fprintf(&b, "lane %s %v\n", group, lane)
				}
				claims, err := queue.Claim(ctx, 100, time.Hour)
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range claims {
					fmt.Fprintf(&b, "claim %s\n", c.ID)
				}
				return b.String()
			}
			if a, b := state(together), state(oneByOne); a != b {
				t.Errorf("canceled together:\n%s\none by one:\n%s", a, b)
			}
		})
	}
}

// TestCancelGroupIsNotSentAgain: cancel_all is a once script; a run whose
// reply is lost is sent once, and its error is the transport's.
func TestCancelGroupIsNotSentAgain(t *testing.T) {
	testserver.Parallel(t)
	queue, proxy, direct := proxiedQueue(t)
	ctx := context.Background()
	if err := direct.ScriptLoad(ctx, lua.CancelAll).Err(); err != nil {
		t.Fatal(err)
	}
	ids := admitN(t, queue, "g", 3)
	fault := proxy.DropReply(sha(lua.CancelAll))
	canceled, err := queue.CancelGroup(ctx, "g", nil)
	var refusal *emq.ScriptError
	if err == nil || errors.As(err, &refusal) || len(canceled) != 0 {
		t.Errorf("cancel group = %d jobs, %v; want the lost reply's error", len(canceled), err)
	}
	if n := fault.Seen(); n != 1 {
		t.Errorf("sent %d times, want once", n)
	}
	for _, id := range ids {
		if got := state(t, queue, id); got != emq.StateCanceled {
			t.Errorf("%s is %s; the one run withdrew it", id, got)
		}
	}
}

// TestCancelGroupLeavesARowItCannotRead: a job whose row is in no format
// the script reads stays where it is (claim reports it) instead of failing
// the run after it withdrew others; a failure between runs returns what the
// runs before withdrew.
func TestCancelGroupLeavesARowItCannotRead(t *testing.T) {
	testserver.Parallel(t)
	queue, rdb := newQueue(t)
	ctx := context.Background()
	ids := admitN(t, queue, "g", 4)
	if err := rdb.HSet(ctx, emq.JobsKey(queue.Name()), ids[1], "not a row").Err(); err != nil {
		t.Fatal(err)
	}
	stop := errors.New("stop")
	canceled, err := queue.CancelGroupIn(ctx, "g", nil, 1, func(string) error { return stop })
	if !errors.Is(err, stop) || len(canceled) != 1 || canceled[0].ID != ids[0] {
		t.Fatalf("first run: %d jobs, %v; want %s and the failure", len(canceled), err, ids[0])
	}
	canceled, err = queue.CancelGroup(ctx, "g", nil)
	if err != nil || len(canceled) != 2 || canceled[0].ID != ids[2] || canceled[1].ID != ids[3] {
		t.Fatalf("cancel group: %v, %v; want %s and %s", canceled, err, ids[2], ids[3])
	}
	if lane, err := rdb.LRange(ctx, queue.Key("lane:g"), 0, -1).Result(); err != nil || !slices.Equal(lane, ids[1:2]) {
		t.Errorf("lane g = %v, %v; want the unreadable job alone", lane, err)
	}
	if depth, err := queue.LaneDepth(ctx, "g"); err != nil || depth != 1 {
		t.Errorf("lane depth %d, %v; want 1", depth, err)
	}
}

// TestCancelGroupRefusesWhatIsNoCall: no group, a member without a name.
func TestCancelGroupRefusesWhatIsNoCall(t *testing.T) {
	testserver.Parallel(t)
	queue, _ := newQueue(t)
	ctx := context.Background()
	if _, err := queue.CancelGroup(ctx, "", nil); err == nil {
		t.Error("canceled the jobs of no group")
	}
	if _, err := queue.CancelGroup(ctx, "g", &emq.PayloadMember{Value: "x"}); err == nil {
		t.Error("matched a member without a name")
	}
}

// BenchmarkCancelGroup withdraws 5,000 jobs of one group, as orders look (a
// JSON object of about 300 bytes): 80 % in its lane, 10 % delayed, 10 % on
// the front list, half of them of the symbol the member picks. It reports the
// server's time per script run (commandstats) and per job withdrawn.
func BenchmarkCancelGroup(b *testing.B) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		only *emq.PayloadMember
	}{{"every job", nil}, {"one symbol", &emq.PayloadMember{Name: "symbol", Value: "BTC-USD"}}} {
		b.Run(tc.name, func(b *testing.B) {
			queue, rdb := newQueue(b)
			var runs, micros, withdrawn int64
			for range b.N {
				b.StopTimer()
				if err := queue.Purge(ctx); err != nil {
					b.Fatal(err)
				}
				if err := queue.Declare(ctx, "test.job"); err != nil {
					b.Fatal(err)
				}
				var jobs []placed
				for i := range 5000 {
					id := fmt.Sprintf("ORD_01J9Z7W2X3Y4Z5A6B7C8%06d", i)
					payload := fmt.Sprintf(`{"id":"%s","client_order_id":"c-%d","account_id":"ACC_01J9Z7W2X3Y4Z5A6B7C8D9E0F1",`+
						`"symbol":"%s","side":"buy","type":"limit","time_in_force":"gtc","quantity":"0.010","price":"50000.00",`+
						`"status":"pending","created_at":"2025-01-01T00:00:00.123456789Z"}`, id, i, []string{"BTC-USD", "ETH-USD"}[i%2])
					where := []string{inLane, inDelayed, inFront, inLane, inLane, inLane, inLane, inLane, inLane, inLane}[i%10]
					jobs = append(jobs, placed{emq.Job{ID: id, Kind: "test.job", Group: "g", Payload: []byte(payload)}, where})
				}
				placeJobs(b, queue, jobs)
				if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				canceled, err := queue.CancelGroup(ctx, "g", tc.only)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				withdrawn += int64(len(canceled))
				info, err := rdb.Info(ctx, "commandstats").Result()
				if err != nil {
					b.Fatal(err)
				}
				for _, line := range strings.Split(info, "\n") {
					var calls, usec int64
					if _, err := fmt.Sscanf(strings.TrimSpace(line), "cmdstat_evalsha:calls=%d,usec=%d,", &calls, &usec); err == nil {
						runs, micros = runs+calls, micros+usec
					} else if _, err := fmt.Sscanf(strings.TrimSpace(line), "cmdstat_eval:calls=%d,usec=%d,", &calls, &usec); err == nil {
						micros += usec // the EVAL after a NOSCRIPT, counted in the EVALSHA's run
					}
				}
			}
			b.ReportMetric(float64(micros)/1000/float64(runs), "server-ms/run")
			b.ReportMetric(float64(micros)/float64(withdrawn), "server-µs/job")
			b.ReportMetric(float64(withdrawn)/float64(b.N), "jobs/op")
		})
	}
}
