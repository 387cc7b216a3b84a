package main

import (
	"cmp"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/internal/cpuprofile"
	"github.com/ordergate/ordergate/lua"
)

// The matching profile's counters of the bench process and of Redis over
// the window: the Go heap's allocations (the workers run in-process) and
// Redis's commands by name (INFO commandstats: a script call counts as
// one evalsha, and each command it runs counts under its own name).

// goAllocs are the Go runtime's cumulative allocation counters.
type goAllocs struct {
	Objects  uint64 `json:"objects"`
	Bytes    uint64 `json:"bytes"`
	GCCycles uint64 `json:"gc_cycles"`
}

func readGoAllocs() goAllocs {
	samples := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}, {Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(samples)
	var a goAllocs
	for i, v := range []*uint64{&a.Objects, &a.Bytes, &a.GCCycles} {
		if samples[i].Value.Kind() == metrics.KindUint64 {
			*v = samples[i].Value.Uint64()
		}
	}
	return a
}

func (a goAllocs) minus(b goAllocs) goAllocs {
	return goAllocs{a.Objects - b.Objects, a.Bytes - b.Bytes, a.GCCycles - b.GCCycles}
}

// redisCommand is one command's counters from INFO commandstats.
type redisCommand struct {
	Name  string  `json:"name"`
	Calls int64   `json:"calls"`
	Usec  float64 `json:"usec"`
}

// readCommandStats sums INFO commandstats over the servers behind rdb
// (every master of a cluster).
func readCommandStats(ctx context.Context, rdb redis.UniversalClient) (map[string]redisCommand, error) {
	stats := map[string]redisCommand{}
	var mu sync.Mutex
	read := func(ctx context.Context, client *redis.Client) error {
		text, err := client.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for line := range strings.Lines(text) {
			// cmdstat_evalsha:calls=12,usec=345,usec_per_call=28.75,...
			name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || !strings.HasPrefix(name, "cmdstat_") {
				continue
			}
			c := stats[name]
			c.Name = strings.TrimPrefix(name, "cmdstat_")
			for field := range strings.SplitSeq(fields, ",") {
				key, value, _ := strings.Cut(field, "=")
				switch key {
				case "calls":
					n, _ := strconv.ParseInt(value, 10, 64)
					c.Calls += n
				case "usec":
					n, _ := strconv.ParseFloat(value, 64)
					c.Usec += n
				}
			}
			stats[name] = c
		}
		return nil
	}
	switch client := rdb.(type) {
	case *redis.Client:
		return stats, read(ctx, client)
	case *redis.ClusterClient:
		return stats, client.ForEachMaster(ctx, read)
	}
	return nil, fmt.Errorf("no commandstats of a %T", rdb)
}

// commandsBetween is what ran between two readings, most calls first.
func commandsBetween(before, after map[string]redisCommand) []redisCommand {
	var list []redisCommand
	for name, a := range after {
		b := before[name]
		if d := (redisCommand{a.Name, a.Calls - b.Calls, a.Usec - b.Usec}); d.Calls > 0 {
			list = append(list, d)
		}
	}
	slices.SortFunc(list, func(a, b redisCommand) int {
		return cmp.Or(cmp.Compare(b.Calls, a.Calls), strings.Compare(a.Name, b.Name))
	})
	return list
}

// goProfiles writes the bench process's CPU profile and heap allocation
// profiles of one matching run's window (-match-cpuprofile,
// -match-memprofile: each run's file is the path with the run's name
// added). The allocation profile is written at the window's start
// (PATH.RUN.base) and end (PATH.RUN): `go tool pprof -sample_index=alloc_space
// -base PATH.RUN.base PATH.RUN` is the window's.
type goProfiles struct {
	cpuPath, memPath string
	stopCPU          func() error
}

func (g *goProfiles) start(run string) error {
	if g.memPath != "" {
		if err := writeAllocs(g.memPath + "." + run + ".base"); err != nil {
			return err
		}
	}
	if g.cpuPath != "" {
		stop, err := cpuprofile.Start(g.cpuPath + "." + run)
		if err != nil {
			return err
		}
		g.stopCPU = stop
	}
	return nil
}

func (g *goProfiles) stop(run string) error {
	var err error
	if g.stopCPU != nil {
		err = g.stopCPU()
		g.stopCPU = nil
	}
	if g.memPath != "" {
		err = cmp.Or(err, writeAllocs(g.memPath+"."+run))
	}
	return err
}

// writeAllocs writes the allocation profile as of a GC run now, so that
// it counts every allocation until now.
func writeAllocs(path string) error {
	runtime.GC()
	file, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(file, 0); err != nil {
		file.Close()
		return err
	}
	return file.Close()
}

// scriptCounter counts the script calls a worker's Redis client sends, by
// script (INFO commandstats counts them all as evalsha): a go-redis hook
// the profile adds to each worker's client.
type scriptCounter struct {
	mu    sync.Mutex
	names map[string]string
	calls map[string]int64
}

func newScriptCounter() *scriptCounter {
	scripts := map[string]string{
		"admit": lua.Admit, "claim": lua.Claim, "extend": lua.Extend, "complete": lua.Complete, "retry": lua.Retry,
		"release": lua.Release, "promote": lua.Promote, "reap": lua.Reap, "cancel": lua.Cancel, "cancel_all": lua.CancelAll,
		"requeue": lua.Requeue, "declare": lua.Declare, "cache_fill": lua.CacheFill, "cache_server": lua.CacheServer,
		"log_append": lua.LogAppend, "log_archived": lua.LogArchived, "seat_take": lua.SeatTake, "seat_renew": lua.SeatRenew,
		"ownership_acquire": lua.OwnershipAcquire, "ownership_extend": lua.OwnershipExtend,
		"ownership_release": lua.OwnershipRelease, "ownership_read": lua.OwnershipRead, "ownership_roster": lua.OwnershipRoster,
	}
	c := &scriptCounter{names: map[string]string{}, calls: map[string]int64{}}
	for name, src := range scripts {
		sum := sha1.Sum([]byte(src))
		c.names[hex.EncodeToString(sum[:])] = name
	}
	return c
}

func (c *scriptCounter) count(cmds ...redis.Cmder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cmd := range cmds {
		args := cmd.Args()
		name := strings.ToLower(fmt.Sprint(args[0]))
		switch {
		case name == "evalsha" && len(args) > 1:
			name = cmp.Or(c.names[fmt.Sprint(args[1])], "evalsha "+fmt.Sprint(args[1]))
		case name == "eval":
			name = "eval (after NOSCRIPT)"
		default:
			name = "· " + name
		}
		c.calls[name]++
	}
}

func (c *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count(cmd)
		return next(ctx, cmd)
	}
}

func (c *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.count(cmds...)
		return next(ctx, cmds)
	}
}

// snapshot is the calls counted so far, by script (commands sent
// directly are named "· command").
func (c *scriptCounter) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.calls)
}
