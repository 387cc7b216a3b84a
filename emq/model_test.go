package emq_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// modelJob is a job as the pure Go model of the queue sees it.
type modelJob struct {
	group    string
	label    string // the payload's member "s"; empty: none
	state    string
	attempts int64
	forgiven int64
	expired  bool // active with its lease run out
}

// queueModel is the state machine the scripts must implement.
type queueModel struct {
	jobs        map[string]*modelJob
	order       []string // ids in admission order
	maxAttempts int64
}

func (m *queueModel) count(state string) int64 {
	var n int64
	for _, job := range m.jobs {
		if job.state == state {
			n++
		}
	}
	return n
}

// TestQueueAgreesWithModel drives random sequences of moves against a real
// Redis and a pure model, and compares every job's state and every count
// after each step.
func TestQueueAgreesWithModel(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	rdb := newRedisForModel(t)
	rapid.Check(t, func(rt *rapid.T) {
		if err := flush(ctx, rdb); err != nil {
			rt.Fatal(err)
		}
		client, err := emq.Connect(ctx, rdb)
		if err != nil {
			rt.Fatal(err)
		}
		queue := client.Queue("model", emq.WithRetention(1000))
		if err := queue.Declare(ctx, "test.job"); err != nil {
			rt.Fatal(err)
		}
		policy := emq.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Hour, MaxDelay: time.Hour}
		model := &queueModel{jobs: map[string]*modelJob{}, maxAttempts: int64(policy.MaxAttempts)}

		// pick draws a known job and a token that is current or stale.
		pick := func(rt *rapid.T) (string, int64, bool) {
			if len(model.order) == 0 {
				return "", 0, false
			}
			id := rapid.SampledFrom(model.order).Draw(rt, "id")
			token := model.jobs[id].attempts - rapid.Int64Range(0, 1).Draw(rt, "staleness")
			return id, token, true
		}
		fencedOK := func(id string, token int64) bool {
			job := model.jobs[id]
			return job.state == emq.StateActive && job.attempts == token
		}
		expectFence := func(rt *rapid.T, move string, id string, token int64, err error) bool {
			ok := fencedOK(id, token)
			if ok && err != nil {
				rt.Fatalf("%s %s token %d: %v, want success", move, id, token, err)
			}
			if !ok && !errors.Is(err, emq.ErrStale) {
				rt.Fatalf("%s %s token %d: %v, want ErrStale", move, id, token, err)
			}
			return ok
		}

		rt.Repeat(map[string]func(*rapid.T){
			"admit": func(rt *rapid.T) {
				id := fmt.Sprintf("J%03d", len(model.order))
				group := rapid.SampledFrom([]string{"a", "b", "c"}).Draw(rt, "group")
				label := rapid.SampledFrom([]string{"x", "y", ""}).Draw(rt, "label")
				if _, err := queue.Admit(ctx, labeled(id, group, label)); err != nil {
					rt.Fatal(err)
				}
				model.jobs[id] = &modelJob{group: group, label: label, state: emq.StatePending}
				model.order = append(model.order, id)
			},
			"claim": func(rt *rapid.T) {
				n := rapid.IntRange(1, 3).Draw(rt, "n")
				claims, err := queue.Claim(ctx, n, time.Hour)
				if err != nil {
					rt.Fatal(err)
				}
				if want := min(int64(n), model.count(emq.StatePending)); int64(len(claims)) != want {
					rt.Fatalf("claimed %d, want %d", len(claims), want)
				}
				for _, c := range claims {
					job := model.jobs[c.ID]
					if job == nil || job.state != emq.StatePending {
						rt.Fatalf("claimed %s, which the model has as %+v", c.ID, job)
					}
					job.state, job.attempts, job.expired = emq.StateActive, job.attempts+1, false
					if c.Token != job.attempts || c.Group != job.group {
						rt.Fatalf("claim of %s: token %d group %s, model %+v", c.ID, c.Token, c.Group, job)
					}
				}
			},
			"extend": func(rt *rapid.T) {
				if id, token, ok := pick(rt); ok {
					_, err := queue.Extend(ctx, id, token, time.Hour)
					if expectFence(rt, "extend", id, token, err) {
						model.jobs[id].expired = false
					}
				}
			},
			"complete": func(rt *rapid.T) {
				if id, token, ok := pick(rt); ok {
					if expectFence(rt, "complete", id, token, queue.Complete(ctx, id, token)) {
						model.jobs[id].state = emq.StateDone
					}
				}
			},
			"retry": func(rt *rapid.T) {
				if id, token, ok := pick(rt); ok {
					retried, err := queue.Retry(ctx, id, token, errors.New("boom"), policy)
					if expectFence(rt, "retry", id, token, err) {
						job := model.jobs[id]
						job.state = emq.StateDelayed
						if job.attempts-job.forgiven >= model.maxAttempts {
							job.state = emq.StateDead
						}
						if retried.Dead != (job.state == emq.StateDead) {
							rt.Fatalf("retry of %s: dead %v, model %s", id, retried.Dead, job.state)
						}
					}
				}
			},
			"release": func(rt *rapid.T) {
				if id, token, ok := pick(rt); ok {
					if expectFence(rt, "release", id, token, queue.Release(ctx, id, token)) {
						job := model.jobs[id]
						job.state, job.forgiven, job.expired = emq.StatePending, job.forgiven+1, false
					}
				}
			},
			"cancel": func(rt *rapid.T) {
				if id, _, ok := pick(rt); ok {
					job := model.jobs[id]
					err := queue.Cancel(ctx, id)
					if job.state == emq.StatePending || job.state == emq.StateDelayed {
						if err != nil {
							rt.Fatalf("cancel %s (%s): %v", id, job.state, err)
						}
						job.state = emq.StateCanceled
					} else if !errors.Is(err, emq.ErrState) {
						rt.Fatalf("cancel %s (%s): %v, want ErrState", id, job.state, err)
					}
				}
			},
			"cancel group": func(rt *rapid.T) {
				group := rapid.SampledFrom([]string{"a", "b", "c"}).Draw(rt, "group")
				var only *emq.PayloadMember
				if rapid.Bool().Draw(rt, "filtered") {
					only = &emq.PayloadMember{Name: "s", Value: rapid.SampledFrom([]string{"x", "y", ""}).Draw(rt, "value")}
				}
				canceled, err := queue.CancelGroupIn(ctx, group, only, rapid.IntRange(1, 4).Draw(rt, "per run"), nil)
				if err != nil {
					rt.Fatal(err)
				}
				var got, want []string
				for _, job := range canceled {
					got = append(got, job.ID)
				}
				for _, id := range model.order {
					job := model.jobs[id]
					waiting := job.state == emq.StatePending || job.state == emq.StateDelayed
					if job.group == group && waiting && (only == nil || (job.label == only.Value && job.label != "")) {
						want = append(want, id)
						job.state = emq.StateCanceled
					}
				}
				slices.Sort(got)
				if !slices.Equal(got, want) {
					rt.Fatalf("cancel group %s (%v) withdrew %v, model %v", group, only, got, want)
				}
			},
			"lease runs out": func(rt *rapid.T) {
				var active []string
				for _, id := range model.order {
					if model.jobs[id].state == emq.StateActive {
						active = append(active, id)
					}
				}
				if len(active) > 0 {
					id := rapid.SampledFrom(active).Draw(rt, "active")
					expireLease(rt, rdb, queue, id)
					model.jobs[id].expired = true
				}
			},
			"reap": func(rt *rapid.T) {
				reaped, err := queue.Reap(ctx, int(model.maxAttempts), 100)
				if err != nil {
					rt.Fatal(err)
				}
				var want emq.Reaped
				for _, job := range model.jobs {
					if job.state == emq.StateActive && job.expired {
						job.expired = false
						if job.attempts-job.forgiven >= model.maxAttempts {
							job.state = emq.StateDead
							want.Dead++
						} else {
							job.state = emq.StatePending
							want.Requeued++
						}
					}
				}
				if reaped != want {
					rt.Fatalf("reap = %+v, model %+v", reaped, want)
				}
			},
			"backoff passes": func(rt *rapid.T) {
				delayed, err := rdb.ZRange(ctx, queue.Key("delayed"), 0, -1).Result()
				if err != nil {
					rt.Fatal(err)
				}
				for _, id := range delayed {
					rdb.ZAdd(ctx, queue.Key("delayed"), redis.Z{Score: 0, Member: id})
				}
				promoted, err := queue.Promote(ctx, 100)
				if err != nil {
					rt.Fatal(err)
				}
				if int64(promoted) != model.count(emq.StateDelayed) {
					rt.Fatalf("promoted %d, model has %d delayed", promoted, model.count(emq.StateDelayed))
				}
				for _, job := range model.jobs {
					if job.state == emq.StateDelayed {
						job.state = emq.StatePending
					}
				}
			},
			"": func(rt *rapid.T) { checkAgainstModel(rt, ctx, rdb, queue, model) },
		})
	})
}

func checkAgainstModel(rt *rapid.T, ctx context.Context, rdb redis.UniversalClient, queue *emq.Queue, model *queueModel) {
	stats, err := queue.Stats(ctx)
	if err != nil {
		rt.Fatal(err)
	}
	got := []int64{stats.Pending, stats.Active, stats.Delayed, stats.Dead, stats.Finished}
	want := []int64{model.count(emq.StatePending), model.count(emq.StateActive), model.count(emq.StateDelayed),
		model.count(emq.StateDead), model.count(emq.StateDone) + model.count(emq.StateCanceled)}
	if !slices.Equal(got, want) {
		rt.Fatalf("counts pending/active/delayed/dead/finished = %v, model %v", got, want)
	}
	lanes, err := queue.LaneDepths(ctx)
	if err != nil {
		rt.Fatal(err)
	}
	wantLanes := map[string]int64{}
	for _, id := range model.order {
		job := model.jobs[id]
		info, err := queue.Job(ctx, id)
		if err != nil {
			rt.Fatalf("job %s: %v", id, err)
		}
		if info.State != job.state || info.Attempts != job.attempts {
			rt.Fatalf("job %s: state %s attempts %d, model %+v", id, info.State, info.Attempts, job)
		}
		if job.state == emq.StatePending {
			wantLanes[job.group]++
		}
	}
	for group, depth := range lanes {
		if depth != wantLanes[group] {
			rt.Fatalf("lane %s holds %d, model %d", group, depth, wantLanes[group])
		}
	}
	if len(lanes) != len(wantLanes) {
		rt.Fatalf("lanes %v, model %v", lanes, wantLanes)
	}
	checkLaneBookkeeping(rt, rdb, queue)
}

// flush empties the server (every master of a cluster).
func flush(ctx context.Context, rdb redis.UniversalClient) error {
	if cluster, ok := rdb.(*redis.ClusterClient); ok {
		return cluster.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			return node.FlushAll(ctx).Err()
		})
	}
	return rdb.FlushAll(ctx).Err()
}
