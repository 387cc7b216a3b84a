package emq

import (
	"github.com/ordergate/ordergate/internal/scriptpipe"
	"github.com/ordergate/ordergate/lua"
)

// Scripts run EVALSHA first, EVAL when the server answers NOSCRIPT (after a
// restart or SCRIPT FLUSH). Each is declared with what a second run of one
// call would do (docs/protocol.md has the table): a Repeatable one may be
// sent again by go-redis after a lost reply; a Once one never is, so a call
// whose reply is lost fails with the transport's error, not a refusal, and
// leaves unknown whether the move was made.
var (
	// A second run answers "duplicate" to the first run's own admission
	// (or EMQEXISTS without a dedup key), and takes a second permit.
	admitScript = scriptpipe.Once(lua.Admit)
	// A second run leases more jobs, and the first run's jobs are leased
	// to nobody until their lease runs out and the reaper takes them back.
	claimScript = scriptpipe.Once(lua.Claim)
	// A second run renews the lease again, or finds it lost.
	extendScript = scriptpipe.Repeatable(lua.Extend)
	// A second run of complete, retry (and bury) or release is refused
	// with EMQSTALE: the first run's own move ended the lease.
	completeScript = scriptpipe.Once(lua.Complete)
	retryScript    = scriptpipe.Once(lua.Retry)
	releaseScript  = scriptpipe.Once(lua.Release)
	// A second run of promote or reap moves what is due by then, as the
	// next tick's would; only its counts leave out the first run's.
	promoteScript = scriptpipe.Repeatable(lua.Promote)
	reapScript    = scriptpipe.Repeatable(lua.Reap)
	// A second run of cancel or requeue is refused with EMQSTATE: the
	// first run's own move left the job canceled or pending.
	cancelScript  = scriptpipe.Once(lua.Cancel)
	requeueScript = scriptpipe.Once(lua.Requeue)
	// A second run of cancel_all withdraws nothing the first run withdrew,
	// so the jobs that run answered would be lost to the caller.
	cancelAllScript = scriptpipe.Once(lua.CancelAll)
	// A second run of declare writes the same kinds and settings again;
	// a retention it changed is already the stored one, so it changes
	// nothing more.
	declareScript = scriptpipe.Repeatable(lua.Declare)

	// A second run takes a second permit, and may refuse for want of it.
	rateLimitScript = scriptpipe.Once(lua.RateLimit)

	// A second run of a seat take finds the holder seated by the first
	// and renews its seat: the same answer. A second run of a renewal
	// renews the same seats a moment later.
	seatTakeScript  = scriptpipe.Repeatable(lua.SeatTake)
	seatRenewScript = scriptpipe.Repeatable(lua.SeatRenew)
	// A second run of ownership_acquire takes the lease again under a
	// newer token, ending only the first run's lease, whose token nobody
	// learned; or finds it taken by another meanwhile, which is the truth.
	ownershipAcquireScript = scriptpipe.Repeatable(lua.OwnershipAcquire)
	// A second run of ownership_extend renews the lease a moment later,
	// or finds it lost.
	ownershipExtendScript = scriptpipe.Repeatable(lua.OwnershipExtend)
	// A second run of ownership_release finds the lease released already
	// (or taken since by another, whose lease it leaves) and changes nothing.
	ownershipReleaseScript = scriptpipe.Repeatable(lua.OwnershipRelease)
	// ownership_read writes nothing; ownership_roster renews the caller's
	// membership a moment later and says the same held count again.
	ownershipReadScript   = scriptpipe.Repeatable(lua.OwnershipRead)
	ownershipRosterScript = scriptpipe.Repeatable(lua.OwnershipRoster)
)
