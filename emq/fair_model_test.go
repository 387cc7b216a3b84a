package emq_test

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ordergate/ordergate/emq"
)

// fairModel is the rotation as the scripts must keep it: each lane with a
// job enters at max(virtual time, its finish tag) and takes one tag a job.
type fairModel struct {
	lanes    map[string][]string // group -> pending ids, oldest first
	rotation map[string]int64    // group -> start tag of its lane's head
	finish   map[string]int64    // group -> finish tag once its lane ran empty
	clock    int64               // the highest tag claimed
}

func (m *fairModel) admit(id, group string) {
	m.lanes[group] = append(m.lanes[group], id)
	if len(m.lanes[group]) == 1 {
		m.rotation[group] = max(m.clock, m.finish[group])
	}
}

// claim checks that id is the head of a lane at the lowest tag, then moves
// it: lanes of one tag are equally due, so their order is free.
func (m *fairModel) claim(id string) error {
	due := int64(-1)
	for _, tag := range m.rotation {
		if due < 0 || tag < due {
			due = tag
		}
	}
	for group, ids := range m.lanes {
		if len(ids) == 0 || ids[0] != id {
			continue
		}
		if m.rotation[group] != due {
			return fmt.Errorf("claimed %s of %s at tag %d while tag %d was due (rotation %v)",
				id, group, m.rotation[group], due, m.rotation)
		}
		m.lanes[group] = ids[1:]
		m.clock = max(m.clock, due)
		if len(m.lanes[group]) > 0 {
			m.rotation[group] = due + 1
		} else {
			delete(m.lanes, group)
			delete(m.rotation, group)
			m.finish[group] = due + 1
		}
		return nil
	}
	return fmt.Errorf("claimed %s, at the head of no lane (lanes %v)", id, m.lanes)
}

// TestClaimsKeepTheOrderOfTags drives admissions (to idle groups among
// them, which join the rotation unnamed by a claimer's heads) and claims
// by three claimers, each with heads of its own and so stale ones, against
// a real Redis and a model of the rotation: every job claimed must be at the
// head of a lane of the lowest tag, no job claimed twice or left behind, and
// the rotation, lanes' counts, finish tags and virtual time must agree with
// the model after every step.
func TestClaimsKeepTheOrderOfTags(t *testing.T) {
	ctx := context.Background()
	rdb := newRedisForModel(t)
	groups := make([]string, 90)
	for i := range groups {
		groups[i] = fmt.Sprintf("g%02d", i)
	}
	rapid.Check(t, func(rt *rapid.T) {
		if err := flush(ctx, rdb); err != nil {
			rt.Fatal(err)
		}
		var claimers []*emq.Queue
		for range 3 {
			client, err := emq.Connect(ctx, rdb)
			if err != nil {
				rt.Fatal(err)
			}
			claimers = append(claimers, client.Queue("fair"))
		}
		if err := claimers[0].Declare(ctx, "test.job"); err != nil {
			rt.Fatal(err)
		}
		queue := claimers[0]
		model := &fairModel{lanes: map[string][]string{}, rotation: map[string]int64{}, finish: map[string]int64{}}
		admitted := 0
		admit := func(rt *rapid.T, group string) {
			id := fmt.Sprintf("J%05d", admitted)
			admitted++
			if _, err := queue.Admit(ctx, labeled(id, group, "")); err != nil {
				rt.Fatal(err)
			}
			model.admit(id, group)
		}
		pending := func() int {
			n := 0
			for _, ids := range model.lanes {
				n += len(ids)
			}
			return n
		}
		rt.Repeat(map[string]func(*rapid.T){
			"admit": func(rt *rapid.T) {
				admit(rt, rapid.SampledFrom(groups).Draw(rt, "group"))
			},
			// Many idle groups at once: more than a claim passes over.
			"burst": func(rt *rapid.T) {
				from := rapid.IntRange(0, len(groups)-1).Draw(rt, "from")
				for _, group := range groups[from:min(len(groups), from+rapid.IntRange(1, 80).Draw(rt, "burst"))] {
					admit(rt, group)
				}
			},
			"claim": func(rt *rapid.T) {
				claimer := claimers[rapid.IntRange(0, len(claimers)-1).Draw(rt, "claimer")]
				n := rapid.IntRange(1, 12).Draw(rt, "n")
				want := min(n, pending())
				claims, err := claimer.Claim(ctx, n, time.Hour)
				if err != nil {
					rt.Fatal(err)
				}
				if len(claims) != want {
					rt.Fatalf("claimed %d of %d, want %d", len(claims), n, want)
				}
				for _, c := range claims {
					if err := model.claim(c.ID); err != nil {
						rt.Fatal(err)
					}
				}
			},
			"": func(rt *rapid.T) {
				rotation, err := rdb.ZRangeWithScores(ctx, queue.Key("rotation"), 0, -1).Result()
				if err != nil {
					rt.Fatal(err)
				}
				got := map[string]int64{}
				for _, z := range rotation {
					got[z.Member.(string)] = int64(z.Score)
				}
				if !maps.Equal(got, model.rotation) {
					rt.Fatalf("rotation %v, model %v", got, model.rotation)
				}
				counts := map[string]int64{}
				for group, ids := range model.lanes {
					counts[group] = int64(len(ids))
				}
				if got := hashInts(rt, rdb.HGetAll(ctx, queue.Key("lanes")).Val()); !maps.Equal(got, counts) {
					rt.Fatalf("lanes' counts %v, model %v", got, counts)
				}
				if got := hashInts(rt, rdb.HGetAll(ctx, queue.Key("tags")).Val()); !maps.Equal(got, model.finish) {
					rt.Fatalf("finish tags %v, model %v", got, model.finish)
				}
				clock, _ := rdb.Get(ctx, queue.Key("clock")).Int64()
				if clock != model.clock {
					rt.Fatalf("clock %d, model %d", clock, model.clock)
				}
			},
		})
	})
}

func hashInts(rt *rapid.T, hash map[string]string) map[string]int64 {
	ints := make(map[string]int64, len(hash))
	for field, value := range hash {
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			rt.Fatalf("%s = %q: %v", field, value, err)
		}
		ints[field] = n
	}
	return ints
}
