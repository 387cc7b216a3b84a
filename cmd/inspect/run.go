package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/ordergate/ordergate/emq"
)

const usage = `usage: inspect [-redis-url URL] COMMAND [ARGS]   (REDIS_URL names the server)

  stats [-json] [QUEUE...]   jobs per state, lanes and the oldest pending job's age,
                             of each queue (default: every declared queue)
  dead [-limit N] QUEUE      dead jobs, most recent death first, with their last error
  lanes QUEUE                pending jobs per group, deepest lane first
  job QUEUE ID               one job's fields; the payload as text, truncated
  requeue QUEUE ID           put a dead job back at the end of its lane with a fresh
                             attempt budget
`

// payloadShown is how much of a payload job prints: enough to recognise an
// order, not so much that one job floods the terminal.
const payloadShown = 512

// timeLayout is RFC 3339 with milliseconds, the queue's clock resolution.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// commands maps each command to how many positional arguments it takes
// (min, max; max < 0 means any number).
var commands = map[string][2]int{
	"stats":   {0, -1},
	"dead":    {1, 1},
	"lanes":   {1, 1},
	"job":     {2, 2},
	"requeue": {2, 2},
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	redisURL := cmp.Or(getenv("REDIS_URL"), "redis://127.0.0.1:6379/0")
	redisFlag := func(flags *flag.FlagSet) {
		flags.StringVar(&redisURL, "redis-url", redisURL, "Redis URL; addr= parameters make it a cluster (REDIS_URL)")
	}
	global := flag.NewFlagSet(args[0], flag.ContinueOnError)
	global.SetOutput(stdout)
	global.Usage = func() { fmt.Fprint(stdout, usage) }
	redisFlag(global)
	if err := global.Parse(args[1:]); err != nil {
		return helpIsNoError(err)
	}
	if global.NArg() == 0 {
		fmt.Fprint(stdout, usage)
		return errors.New("no command given")
	}
	command, rest := global.Arg(0), global.Args()[1:]
	if command == "help" {
		fmt.Fprint(stdout, usage)
		return nil
	}
	counts, known := commands[command]
	if !known {
		fmt.Fprint(stdout, usage)
		return fmt.Errorf("unknown command %q", command)
	}
	var (
		asJSON bool
		limit  int
	)
	flags := flag.NewFlagSet(command, flag.ContinueOnError)
	flags.SetOutput(stdout)
	flags.Usage = func() { fmt.Fprint(stdout, usage) }
	redisFlag(flags)
	switch command {
	case "stats":
		flags.BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	case "dead":
		flags.IntVar(&limit, "limit", 20, "how many dead jobs to list")
	}
	positional, err := parseInterspersed(flags, rest)
	if err != nil {
		return helpIsNoError(err)
	}
	if len(positional) < counts[0] || (counts[1] >= 0 && len(positional) > counts[1]) {
		return fmt.Errorf("%s: wrong number of arguments (%d); see inspect help", command, len(positional))
	}
	if limit < 0 {
		return fmt.Errorf("dead: -limit must not be negative, got %d", limit)
	}

	// Dial refuses a server of another protocol version, whose keys this
	// command would misread. Its eviction warning is for long-running
	// processes; here it would only corrupt -json output.
	client, err := emq.Dial(ctx, redisURL, emq.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return err
	}
	defer client.Close()
	in := inspector{client: client, out: stdout}
	switch command {
	case "stats":
		return in.stats(ctx, positional, asJSON)
	case "dead":
		return in.dead(ctx, positional[0], limit)
	case "lanes":
		return in.lanes(ctx, positional[0])
	case "job":
		return in.job(ctx, positional[0], positional[1])
	default: // requeue
		return in.requeue(ctx, positional[0], positional[1])
	}
}

// parseInterspersed lets flags follow positional arguments, as in
// "dead orders -limit 5": package flag stops at the first positional one.
func parseInterspersed(flags *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := flags.Parse(args); err != nil {
			return nil, err
		}
		if flags.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, flags.Arg(0))
		args = flags.Args()[1:]
	}
}

func helpIsNoError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

type inspector struct {
	client *emq.Client
	out    io.Writer
}

// queue returns a declared queue. Asking for any other name is refused rather
// than answered with zeros, so a typo cannot pass for an empty queue.
func (in inspector) queue(ctx context.Context, name string) (*emq.Queue, error) {
	declared, err := in.client.Queues(ctx)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(declared, name) {
		return nil, fmt.Errorf("no queue %q is declared on this server (declared: %s)", name, strings.Join(declared, ", "))
	}
	return in.client.Queue(name), nil
}

// queueStats is one queue's line of stats -json.
type queueStats struct {
	Queue                string  `json:"queue"`
	Pending              int64   `json:"pending"`
	Active               int64   `json:"active"`
	Delayed              int64   `json:"delayed"`
	Dead                 int64   `json:"dead"`
	Finished             int64   `json:"finished"`
	Lanes                int64   `json:"lanes"`
	OldestPendingSeconds float64 `json:"oldest_pending_seconds"`
}

func (in inspector) stats(ctx context.Context, names []string, asJSON bool) error {
	if len(names) == 0 {
		declared, err := in.client.Queues(ctx)
		if err != nil {
			return err
		}
		names = declared
	}
	all := make([]queueStats, 0, len(names))
	for _, name := range names {
		q, err := in.queue(ctx, name)
		if err != nil {
			return err
		}
		s, err := q.Stats(ctx)
		if err != nil {
			return err
		}
		all = append(all, queueStats{
			Queue: s.Queue, Pending: s.Pending, Active: s.Active, Delayed: s.Delayed, Dead: s.Dead,
			Finished: s.Finished, Lanes: s.Lanes, OldestPendingSeconds: s.OldestPending.Seconds(),
		})
	}
	if asJSON {
		encoder := json.NewEncoder(in.out)
		encoder.SetIndent("", "  ")
		return encoder.Encode(all)
	}
	if len(all) == 0 {
		_, err := fmt.Fprintln(in.out, "no queues are declared on this server")
		return err
	}
	table := newTable(in.out, "QUEUE", "PENDING", "ACTIVE", "DELAYED", "DEAD", "FINISHED", "LANES", "OLDEST PENDING")
	for _, s := range all {
		oldest := "-"
		if s.Pending > 0 {
			oldest = age(time.Duration(s.OldestPendingSeconds * float64(time.Second)))
		}
		table.row(s.Queue, s.Pending, s.Active, s.Delayed, s.Dead, s.Finished, s.Lanes, oldest)
	}
	return table.flush()
}

func (in inspector) dead(ctx context.Context, name string, limit int) error {
	q, err := in.queue(ctx, name)
	if err != nil {
		return err
	}
	total, err := q.DeadCount(ctx)
	if err != nil {
		return err
	}
	if total == 0 {
		_, err := fmt.Fprintf(in.out, "no dead jobs in queue %s\n", name)
		return err
	}
	if limit == 0 {
		_, err := fmt.Fprintf(in.out, "%d dead job(s) in queue %s\n", total, name)
		return err
	}
	jobs, err := q.DeadJobs(ctx, limit)
	if err != nil {
		return err
	}
	table := newTable(in.out, "ID", "GROUP", "ATTEMPTS", "DIED", "LAST ERROR")
	for _, job := range jobs {
		died, err := stateTime(ctx, q, job.ID, emq.StateDead)
		if err != nil {
			return err
		}
		table.row(job.ID, job.Group, job.Attempts, died, oneLine(job.LastError))
	}
	if err := table.flush(); err != nil {
		return err
	}
	if int64(len(jobs)) < total {
		_, err = fmt.Fprintf(in.out, "(%d of %d dead jobs; -limit shows more)\n", len(jobs), total)
	}
	return err
}

func (in inspector) lanes(ctx context.Context, name string) error {
	q, err := in.queue(ctx, name)
	if err != nil {
		return err
	}
	depths, err := q.LaneDepths(ctx)
	if err != nil {
		return err
	}
	if len(depths) == 0 {
		_, err := fmt.Fprintf(in.out, "no pending jobs in queue %s\n", name)
		return err
	}
	groups := make([]string, 0, len(depths))
	for group := range depths {
		groups = append(groups, group)
	}
	slices.SortFunc(groups, func(a, b string) int {
		return cmp.Or(cmp.Compare(depths[b], depths[a]), strings.Compare(a, b))
	})
	table := newTable(in.out, "GROUP", "PENDING")
	for _, group := range groups {
		table.row(group, depths[group])
	}
	return table.flush()
}

func (in inspector) job(ctx context.Context, name, id string) error {
	q, err := in.queue(ctx, name)
	if err != nil {
		return err
	}
	if err := validJobID(id); err != nil {
		return err
	}
	job, err := q.Job(ctx, id)
	if errors.Is(err, emq.ErrNotFound) {
		return fmt.Errorf("no job %s on queue %s (finished jobs are kept only up to the queue's retention)", id, name)
	}
	if err != nil {
		return err
	}
	table := newTable(in.out)
	table.row("id", job.ID)
	table.row("state", job.State)
	table.row("kind", job.Kind)
	table.row("group", job.Group)
	table.row("attempts", job.Attempts)
	table.row("created", job.Created.Format(timeLayout))
	// Where the job waits says when it moves next; the job's own fields do
	// not hold that.
	if label := timeLabel(job.State); label != "" {
		at, err := stateTime(ctx, q, id, job.State)
		if err != nil {
			return err
		}
		table.row(label, at)
	}
	if !job.Finished.IsZero() {
		table.row("finished", job.Finished.Format(timeLayout))
	}
	if job.LastError != "" {
		table.row("last error", oneLine(job.LastError))
	}
	table.row("payload", payloadText(job.Payload))
	return table.flush()
}

// timeLabel says what the time the queue keeps for a job in state means;
// empty for a state that keeps none.
func timeLabel(state string) string {
	switch state {
	case emq.StateActive:
		return "lease ends"
	case emq.StateDelayed:
		return "retry due"
	case emq.StateDead:
		return "died"
	}
	return ""
}

func (in inspector) requeue(ctx context.Context, name, id string) error {
	q, err := in.queue(ctx, name)
	if err != nil {
		return err
	}
	if err := validJobID(id); err != nil {
		return err
	}
	err = q.Requeue(ctx, id)
	if errors.Is(err, emq.ErrState) {
		state, _ := emq.StateOf(err)
		return fmt.Errorf("job %s is %s, not dead: only a dead job can be requeued", id, state)
	}
	if errors.Is(err, emq.ErrNotFound) {
		// The script sees only live jobs; a finished one is kept as a record.
		if job, readErr := q.Job(ctx, id); readErr == nil {
			return fmt.Errorf("job %s is %s, not dead: only a dead job can be requeued", id, job.State)
		}
		return fmt.Errorf("no job %s on queue %s", id, name)
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(in.out, "requeued %s on %s: pending again, with a fresh attempt budget\n", id, name)
	return err
}

// validJobID refuses ids that could not name a job: a brace would move the
// key out of the queue's hash slot.
func validJobID(id string) error {
	if id == "" || strings.ContainsAny(id, " {}") {
		return fmt.Errorf("%q is not a job id", id)
	}
	return nil
}

// stateTime shows the time the queue keeps for a job in state.
func stateTime(ctx context.Context, q *emq.Queue, id, state string) (string, error) {
	at, err := q.StateTime(ctx, id, state)
	if errors.Is(err, emq.ErrNotFound) {
		// The job moved on between the two reads.
		return "-", nil
	}
	if err != nil {
		return "", err
	}
	return at.UTC().Format(timeLayout), nil
}

// payloadText shows a payload as text when it is UTF-8 and quoted otherwise,
// cut to payloadShown bytes.
func payloadText(payload []byte) string {
	cut := min(len(payload), payloadShown)
	// Back off to a character boundary so the cut does not make text look
	// like binary.
	for backed := 0; cut < len(payload) && backed < utf8.UTFMax-1 && !utf8.RuneStart(payload[cut]); backed++ {
		cut--
	}
	shown := payload[:cut]
	text := string(shown)
	if !utf8.Valid(shown) || strings.ContainsAny(text, "\n\r\t") {
		text = strconv.Quote(text)
	}
	if cut < len(payload) {
		text += fmt.Sprintf(" … (truncated; %d bytes in all)", len(payload))
	}
	return text
}

// oneLine keeps a multi-line error on one table row.
func oneLine(text string) string { return strings.Join(strings.Fields(text), " ") }

// age prints a duration to the precision a person reads it at.
func age(d time.Duration) string {
	if d < time.Minute {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// table writes aligned columns.
type table struct{ w *tabwriter.Writer }

func newTable(out io.Writer, header ...string) table {
	t := table{tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)}
	if len(header) > 0 {
		fmt.Fprintln(t.w, strings.Join(header, "\t"))
	}
	return t
}

func (t table) row(cells ...any) {
	for i, cell := range cells {
		if i > 0 {
			fmt.Fprint(t.w, "\t")
		}
		fmt.Fprint(t.w, cell)
	}
	fmt.Fprintln(t.w)
}

func (t table) flush() error { return t.w.Flush() }
