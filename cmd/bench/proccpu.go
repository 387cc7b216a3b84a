package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// CPU by process, read from each process's /proc/<pid>/stat and the
// machine's /proc/stat: the profile's "where the cores went" of a matching
// run.

// clockTicks is USER_HZ, the unit of /proc's CPU times: 100 on every Linux
// architecture Go runs on.
const clockTicks = 100

// procStat is what the profile reads of /proc/<pid>/stat.
type procStat struct {
	comm string
	ppid int
	// cpu is the process's own user + system seconds, all its threads;
	// children's is its reaped children's (cutime + cstime).
	cpu, children float64
	// start tells a process from a later one with the same pid.
	start uint64
}

// parseProcStat parses a /proc/<pid>/stat line; comm may hold spaces and
// parentheses, so the fields are counted from the last ')'.
func parseProcStat(line string) (procStat, error) {
	open, end := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
	if open < 0 || end < open {
		return procStat{}, fmt.Errorf("no (comm) in %q", line)
	}
	f := strings.Fields(line[end+1:])
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("%d fields after comm in %q", len(f), line)
	}
	// state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
	// utime stime cutime cstime priority nice threads itrealvalue starttime
	var n [5]uint64
	for i, field := range []int{11, 12, 13, 14, 19} {
		v, err := strconv.ParseUint(f[field], 10, 64)
		if err != nil {
			return procStat{}, fmt.Errorf("field %d of %q: %w", field, line, err)
		}
		n[i] = v
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return procStat{}, err
	}
	return procStat{
		comm:     line[open+1 : end],
		ppid:     ppid,
		cpu:      float64(n[0]+n[1]) / clockTicks,
		children: float64(n[2]+n[3]) / clockTicks,
		start:    n[4],
	}, nil
}

func readProcStat(pid int) (procStat, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(string(data))
}

// machineCPU is /proc/stat's first line: the seconds every CPU was busy
// (user, nice, system, irq, softirq, steal) and idle (idle, iowait).
func machineCPU() (busy, idle float64, err error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	return parseMachineCPU(string(data))
}

func parseMachineCPU(text string) (busy, idle float64, err error) {
	line, _, _ := strings.Cut(text, "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("no cpu line in /proc/stat: %q", line)
	}
	var v [8]float64
	for i := range v {
		n, err := strconv.ParseUint(f[i+1], 10, 64)
		if err != nil {
			return 0, 0, err
		}
		v[i] = float64(n) / clockTicks
	}
	// user nice system idle iowait irq softirq steal
	return v[0] + v[1] + v[2] + v[5] + v[6] + v[7], v[3] + v[4], nil
}

// childPIDs is the children of pid, from /proc/<pid>/task/<pid>/children
// (every PostgreSQL process is the postmaster's, which has one thread), or
// by a scan of /proc where the kernel has no such file.
func childPIDs(pid int) []int {
	p := strconv.Itoa(pid)
	var pids []int
	if data, err := os.ReadFile("/proc/" + p + "/task/" + p + "/children"); err == nil {
		for _, field := range strings.Fields(string(data)) {
			if child, err := strconv.Atoi(field); err == nil {
				pids = append(pids, child)
			}
		}
		return pids
	}
	entries, _ := os.ReadDir("/proc")
	for _, entry := range entries {
		child, err := strconv.Atoi(entry.Name())
		if err != nil {
			continue
		}
		if st, err := readProcStat(child); err == nil && st.ppid == pid {
			pids = append(pids, child)
		}
	}
	return pids
}

// processTitle is a process's command line as ps shows it: PostgreSQL
// writes its processes' titles there ("postgres: walwriter", "postgres:
// postgres bench_match_hot_1 127.0.0.1(4711) idle").
func processTitle(pid int) string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(bytes.ReplaceAll(data, []byte{0}, []byte{' '})))
}

// Kinds of PostgreSQL process the profile tells apart.
const (
	pgBackends   = "backends of the run's database"
	pgProfiler   = "the profile's own backend (activity samples)"
	pgOther      = "other backends"
	pgWALWriter  = "wal writer"
	pgCheckpoint = "checkpointer and background writer"
	pgVacuum     = "autovacuum"
	pgRest       = "other server processes (launchers, archiver)"
	pgPostmaster = "the postmaster itself (it forks the backends)"
	pgUnsampled  = "exited processes not sampled (lived < 250 ms, or exited before the window and reaped in it)"
)

// postgresKind sorts a PostgreSQL process by its title: a backend of
// database (but the one whose pid is profiler), another backend, or one of
// the server's own processes.
func postgresKind(title, database string, pid, profiler int) string {
	rest, ok := strings.CutPrefix(title, "postgres: ")
	if !ok {
		return pgRest
	}
	switch {
	case strings.HasPrefix(rest, "walwriter"):
		return pgWALWriter
	case strings.HasPrefix(rest, "checkpointer"), strings.HasPrefix(rest, "background writer"):
		return pgCheckpoint
	case strings.HasPrefix(rest, "autovacuum"):
		return pgVacuum
	case strings.HasPrefix(rest, "logical replication"), strings.HasPrefix(rest, "archiver"),
		strings.HasPrefix(rest, "walsender"), strings.HasPrefix(rest, "stats"):
		return pgRest
	}
	if pid == profiler {
		return pgProfiler
	}
	// user database host(port) activity
	if f := strings.Fields(rest); len(f) >= 2 && f[1] == database {
		return pgBackends
	}
	return pgOther
}

// cpuWatch follows the CPU of the processes of one run: the bench's
// PostgreSQL server (the postmaster and its children, by kind), its
// redis-server and the bench process, and the machine's. Children are
// sampled every quarter second so that one that exits mid-run (an
// autovacuum worker) is still put under its kind; the server's total is
// exact whatever the sampling (a reaped child's time is in the
// postmaster's).
type cpuWatch struct {
	postmaster, redis int // 0: not ours to read
	database          string
	profiler          int

	mu sync.Mutex
	// base and last are each PostgreSQL child's CPU when first and last
	// seen, by pid and start.
	base, last map[procKey]float64
	kind       map[procKey]string
	atStart    cpuReading
	stop       chan struct{}
	stopped    sync.WaitGroup
}

type procKey struct {
	pid   int
	start uint64
}

// cpuReading is one reading of everything the watch sums.
type cpuReading struct {
	at                 time.Time
	busy, idle         float64
	bench, redis       float64
	postmaster         float64 // the postmaster's own and its reaped children's
	postmasterSelf     float64
	children           map[procKey]float64
	benchGC, benchUser float64
}

func newCPUWatch(postmaster, redis, profiler int, database string) *cpuWatch {
	return &cpuWatch{postmaster: postmaster, redis: redis, profiler: profiler, database: database,
		base: map[procKey]float64{}, last: map[procKey]float64{}, kind: map[procKey]string{}}
}

// read takes a reading and records the children it saw.
func (w *cpuWatch) read() (cpuReading, error) {
	r := cpuReading{at: time.Now(), children: map[procKey]float64{}}
	var err error
	if r.busy, r.idle, err = machineCPU(); err != nil {
		return r, err
	}
	self, err := readProcStat(os.Getpid())
	if err != nil {
		return r, err
	}
	r.bench = self.cpu
	r.benchGC, r.benchUser = goCPU()
	if w.redis > 0 {
		if st, err := readProcStat(w.redis); err == nil {
			r.redis = st.cpu
		}
	}
	if w.postmaster > 0 {
		st, err := readProcStat(w.postmaster)
		if err != nil {
			return r, fmt.Errorf("the postmaster: %w", err)
		}
		r.postmaster, r.postmasterSelf = st.cpu+st.children, st.cpu
		for _, pid := range childPIDs(w.postmaster) {
			st, err := readProcStat(pid)
			if err != nil || st.ppid != w.postmaster {
				continue // exited meanwhile
			}
			key := procKey{pid, st.start}
			r.children[key] = st.cpu
			w.mu.Lock()
			kind, seen := w.kind[key]
			if !seen {
				if w.stop == nil { // the first reading: the base
					w.base[key] = st.cpu
				} else {
					w.base[key] = 0 // born in the window
				}
			}
			// A child just forked has the postmaster's command line until
			// it names itself: read again until it has a kind of its own.
			if !seen || kind == pgRest || kind == pgOther {
				w.kind[key] = postgresKind(processTitle(pid), w.database, pid, w.profiler)
			}
			w.last[key] = st.cpu
			w.mu.Unlock()
		}
	}
	return r, nil
}

// start takes the first reading and samples the children until end.
func (w *cpuWatch) start() error {
	first, err := w.read()
	if err != nil {
		return err
	}
	w.atStart = first
	w.stop = make(chan struct{})
	if w.postmaster == 0 {
		return nil
	}
	w.stopped.Go(func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
				_, _ = w.read()
			}
		}
	})
	return nil
}

// end takes the last reading and sums the window.
func (w *cpuWatch) end() (cpuProfile, error) {
	close(w.stop)
	w.stopped.Wait()
	last, err := w.read()
	if err != nil {
		return cpuProfile{}, err
	}
	first := w.atStart
	seconds := last.at.Sub(first.at).Seconds()
	p := cpuProfile{Seconds: seconds}
	if seconds <= 0 {
		return p, errors.New("an empty window")
	}
	p.MachineBusy = last.busy - first.busy
	p.MachineIdle = last.idle - first.idle
	p.Bench = last.bench - first.bench
	p.BenchGC = last.benchGC - first.benchGC
	p.BenchGoUser = last.benchUser - first.benchUser
	if w.redis > 0 {
		p.Redis = last.redis - first.redis
		p.HasRedis = true
	}
	if w.postmaster > 0 {
		p.HasPostgres = true
		// A child alive at the start that exited is in the postmaster's
		// children's time whole: its time before the start comes off.
		total := last.postmaster - first.postmaster
		for _, cpu := range last.children {
			total += cpu
		}
		for _, cpu := range first.children {
			total -= cpu
		}
		p.Postgres = total
		w.mu.Lock()
		byKind := map[string]float64{}
		for key, cpu := range w.last {
			byKind[w.kind[key]] += cpu - w.base[key]
		}
		w.mu.Unlock()
		byKind[pgPostmaster] = last.postmasterSelf - first.postmasterSelf
		named := 0.0
		for _, kind := range []string{pgBackends, pgWALWriter, pgCheckpoint, pgVacuum, pgOther, pgProfiler, pgRest, pgPostmaster} {
			p.PostgresKinds = append(p.PostgresKinds, cpuShare{Name: kind, Seconds: byKind[kind]})
			named += byKind[kind]
		}
		p.PostgresKinds = append(p.PostgresKinds, cpuShare{Name: pgUnsampled, Seconds: max(0, total-named)})
		w.mu.Lock()
		for key := range w.kind {
			if _, alive := last.children[key]; !alive {
				p.PostgresExited++
			}
			if _, before := first.children[key]; !before {
				p.PostgresStarted++
			}
		}
		w.mu.Unlock()
	}
	return p, nil
}
