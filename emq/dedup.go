package emq

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// DefaultDedupRetention is how long a dedup key keeps refusing a second job
// on a queue whose declarations never named a retention.
const DefaultDedupRetention = 24 * time.Hour

// dedupSkewAllowance is how far apart the clocks of the processes admitting
// to one queue may be. Dedup windows are cut by the admitting process's clock
// (see dedupWindows), so a skew beyond it shortens how long a dedup key
// refuses a second job by the excess. It is also the shortest window, so a
// clock running ahead by the allowance is at most one window ahead.
const dedupSkewAllowance = time.Minute

// dedupDigestBytes is how much of the SHA-256 of a dedup key names its entry:
// 112 bits make a collision among even 10^9 retained keys a 1-in-10^16
// chance, and a 14-byte field still fits the 16-byte allocation class.
const dedupDigestBytes = 14

func dedupDigest(dedup string) string {
	// Hashed from a stack buffer: []byte(dedup) is on the heap once the key
	// is longer than 32 bytes, as an account:client order id often is.
	var buf [128]byte
	sum := sha256.Sum256(append(buf[:0], dedup...))
	return string(sum[:dedupDigestBytes])
}

// WithDedupRetention makes Declare set the queue's dedup retention: how long
// a dedup key refuses a second job, at least, and at most a window (half the
// retention, a minute at the least) plus the skew allowance of a minute
// longer. The retention is stored with the queue, so every process admitting
// to it follows the same one, whatever it was told: the last declaration
// that names a retention wins, and keys admitted under the one it replaced
// are still refused for as long as that one promised. A queue whose
// declarations never named one keeps DefaultDedupRetention. Zero or less
// names none; a retention is rounded up to whole milliseconds.
func WithDedupRetention(retention time.Duration) QueueOption {
	return func(q *Queue) {
		if retention > 0 {
			q.declaredRetention = (retention + time.Millisecond - 1).Truncate(time.Millisecond)
		}
	}
}

// DedupHeld is the longest a dedup key stays in Redis under retention: the
// retention, a window and the skew allowance. A queue admitting n jobs an
// hour holds the keys of at most n × DedupHeld(R) hours' admissions.
func DedupHeld(retention time.Duration) time.Duration {
	return retention + dedupWindowFor(retention, dedupSkewAllowance) + dedupSkewAllowance
}

// dedupWindowFor is the dedup window length for retention: half the
// retention, so an admission looks in three windows (four near a window's
// end) and a key is held between R and 1.5 R (plus the skew allowance); and
// never shorter than the skew allowance. A window as long as the retention
// would look in one window fewer and hold keys up to 2 R, a third more
// memory at the peak; a quarter of it would save a sixth of that for two
// more lookups per admission.
func dedupWindowFor(retention, skew time.Duration) time.Duration {
	return max((retention+1)/2, skew)
}

// dedupSettings are a queue's dedup settings as declare.lua stores them at
// emq:{q}:dedup: the retention and window length in force, and the earlier
// ones whose windows may still hold keys an admission must find.
type dedupSettings struct {
	// text is the settings as stored, "" when none are: what admit.lua
	// compares with the stored ones.
	text    string
	current dedupSetting
	earlier []dedupSetting
}

// dedupSetting is one retention and window length, in milliseconds; until is
// when an earlier one runs out (server time).
type dedupSetting struct {
	retention, window, until int64
}

// defaultDedup is what a queue with no settings stored runs with.
var defaultDedup = dedupSetting{
	retention: DefaultDedupRetention.Milliseconds(),
	window:    dedupWindowFor(DefaultDedupRetention, dedupSkewAllowance).Milliseconds(),
}

// errDedupSettings: the admit script was handed windows of other dedup
// settings than the queue's (EMQDEDUP); the admission wrote nothing.
var errDedupSettings = errors.New("emq: the queue's dedup settings changed under the admission")

// dedupRounds bounds how often one admission reads new dedup settings off a
// refusal and tries again: settings change only when a declaration changes
// them, so a second round nearly always goes through.
const dedupRounds = 3

// parseDedupSettings reads settings as declare.lua stores them.
func parseDedupSettings(text string) (dedupSettings, error) {
	settings := dedupSettings{text: text, current: defaultDedup}
	if text == "" {
		return settings, nil
	}
	fields := strings.Fields(text)
	numbers := make([]int64, len(fields))
	for i, field := range fields {
		n, err := strconv.ParseInt(field, 10, 64)
		if err != nil || n <= 0 {
			return dedupSettings{}, fmt.Errorf("emq: malformed dedup settings %q", text)
		}
		numbers[i] = n
	}
	if len(numbers) < 2 || (len(numbers)-2)%3 != 0 {
		return dedupSettings{}, fmt.Errorf("emq: malformed dedup settings %q", text)
	}
	settings.current = dedupSetting{retention: numbers[0], window: numbers[1]}
	for i := 2; i < len(numbers); i += 3 {
		settings.earlier = append(settings.earlier, dedupSetting{retention: numbers[i], window: numbers[i+1], until: numbers[i+2]})
	}
	return settings, nil
}

// retention is the retention in force.
func (s dedupSettings) retention() time.Duration {
	return time.Duration(s.current.retention) * time.Millisecond
}

// dedupSettingsCell holds what one client last read of one queue's dedup
// settings; every Queue value of the queue on the client shares it.
type dedupSettingsCell struct {
	settings atomic.Pointer[dedupSettings]
}

// dedupCell is the client's cell for queue name.
func (c *Client) dedupCell(name string) *dedupSettingsCell {
	cell, _ := c.dedup.LoadOrStore(name, &dedupSettingsCell{})
	return cell.(*dedupSettingsCell)
}

// skew is the clock skew allowance the client's admissions assume.
func (c *Client) skew() time.Duration {
	if c.skewAllowance > 0 {
		return c.skewAllowance
	}
	return dedupSkewAllowance
}

// dedupSettings is what the client last read of the queue's dedup settings;
// none stored until it read any.
func (q *Queue) dedupSettings() dedupSettings {
	if held := q.dedup.settings.Load(); held != nil {
		return *held
	}
	return dedupSettings{current: defaultDedup}
}

// learnDedup keeps the settings text read from the server.
func (q *Queue) learnDedup(text string) error {
	settings, err := parseDedupSettings(text)
	if err != nil {
		return fmt.Errorf("%w on %s", err, q.name)
	}
	q.dedup.settings.Store(&settings)
	return nil
}

// learnedDedup reports whether err is the admit script's refusal of stale
// dedup settings, and keeps the settings it names if so.
func (q *Queue) learnedDedup(err error) bool {
	var refusal *ScriptError
	if !errors.As(err, &refusal) || refusal.Code != "EMQDEDUP" {
		return false
	}
	return q.learnDedup(strings.TrimSpace(strings.TrimPrefix(refusal.Message, "EMQDEDUP"))) == nil
}

// dedupKey holds the queue's dedup settings.
func (q *Queue) dedupKey() string { return q.key("dedup") }

// dedupWindowKey is window w of length window (ms).
func (q *Queue) dedupWindowKey(window, w int64) string {
	return q.key("dedup:" + strconv.FormatInt(window, 10) + ":" + strconv.FormatInt(w, 10))
}

// dedupWindows names the dedup hashes of an admission at now under the
// settings s, assuming clocks differ by less than skew: window w of the
// window length W in force by this process's clock, the one it writes to and
// when that may expire, and the other windows a live entry may be in.
//
// An entry must outlive span = ceil(R/W) windows after its own: an entry
// written during w is found by every admission of the next R, since each
// looks back to the window of its now - R - skew, which a writer's clock
// behind ours by up to skew could have written in. Entries in later
// windows exist only once some clock has passed w's end, so those are looked
// in within the skew allowance of it. The hash may expire at the end of
// w+span plus the allowance (the script keeps a later expiry another
// admission asked for), so an entry lives at least R and at most R + W plus
// the allowance. A larger skew than the allowance shortens the refusal by the
// excess.
//
// The windows of each earlier setting are looked in as well until it runs
// out, as that setting's admissions would have: a key admitted before a
// declaration changed the retention is still refused for its own.
func (q *Queue) dedupWindows(s dedupSettings, now time.Time, skew time.Duration) (write string, others []string, expireAt int64) {
	at, allowance := now.UnixMilli(), skew.Milliseconds()
	write = q.dedupWindowKey(s.current.window, at/s.current.window)
	add := func(name string) {
		if name != write && !slices.Contains(others, name) {
			others = append(others, name)
		}
	}
	expireAt = q.settingWindows(s.current, at, allowance, add)
	for _, earlier := range s.earlier {
		if at < earlier.until {
			q.settingWindows(earlier, at, allowance, add)
		}
	}
	return write, others, expireAt
}

// heldWindows is what admitWindows last answered, and for which
// settings, skew allowance and windows.
type heldWindows struct {
	text                  string
	skew, from, to, write int64
	writeKey              string
	others                []string
	expireAt              int64
}

// admitWindows is dedupWindows for an admission: the windows change only
// when now crosses a window's edge (minutes apart), so the last answer is
// kept and handed out again while the settings and the windows it covers
// are the same, sparing each admission the spelling of its keys. Settings
// with earlier ones still running are computed afresh. The others it
// returns are shared: callers copy them.
func (q *Queue) admitWindows(s dedupSettings, now time.Time, skew time.Duration) (write string, others []string, expireAt int64) {
	if len(s.earlier) > 0 {
		return q.dedupWindows(s, now, skew)
	}
	// The window range settingWindows walks for the current setting, and
	// the one written to: the whole of what the answer depends on.
	at, allowance := now.UnixMilli(), skew.Milliseconds()
	from, to := windowRange(s.current, at, allowance)
	window := at / s.current.window
	if held := q.windows.Load(); held != nil && held.text == s.text && held.skew == allowance && held.from == from && held.to == to && held.write == window {
		return held.writeKey, held.others, held.expireAt
	}
	write, others, expireAt = q.dedupWindows(s, now, skew)
	q.windows.Store(&heldWindows{text: s.text, skew: allowance, from: from, to: to, write: window, writeKey: write, others: others, expireAt: expireAt})
	return write, others, expireAt
}

// settingWindows hands add the windows an admission at at looks in under one
// setting, its own included, and returns when that one may expire.
func (q *Queue) settingWindows(s dedupSetting, at, skew int64, add func(string)) (expireAt int64) {
	length := s.window
	span := (s.retention + length - 1) / length
	window := at / length
	from, to := windowRange(s, at, skew)
	for w := from; w <= to; w++ {
		add(q.dedupWindowKey(length, w))
	}
	return (window+span+1)*length + skew
}

// windowRange is the first and the last window an admission at at looks
// in under one setting: back to the window of at - R - skew, since a key
// the first admitter wrote by a clock running behind ours by up to skew is
// still within its R, and on to the window of at + skew.
func windowRange(s dedupSetting, at, skew int64) (from, to int64) {
	return (at - s.retention - skew) / s.window, (at + skew) / s.window
}
