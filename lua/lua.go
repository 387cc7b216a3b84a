// Package lua holds the queue's Redis scripts. Each state move of a job is one
// script file, embedded here so the binaries carry them and emq can run them
// EVALSHA-first. clock.lua reads the server's time, lib.lua holds helpers
// the job moves share, permit_bucket.lua the rate-limit bucket; each is prepended
// to the scripts that use it, so every move still runs as one script.
package lua

import _ "embed"

//go:embed clock.lua
var clock string

//go:embed lib.lua
var libText string

// lib is the job moves' helpers, after the clock they read.
var lib = clock + libText

//go:embed permit_bucket.lua
var permitBucket string

//go:embed log_lib.lua
var logLib string

//go:embed cache_lib.lua
var cacheLib string

// allowOOM lets the archiver's scripts (claim, read mark, mark and trim)
// write on a Redis at maxmemory with noeviction, which refuses every other
// write: the logs an archiver fell behind on are what fill it, and only
// their archiving frees it. They write a few bytes a log and drop entries.
// The flag must open the script, so it goes before what is prepended.
const allowOOM = "#!lua flags=allow-oom\n"

var (
	//go:embed admit.lua
	admit string
	//go:embed claim.lua
	claim string
	//go:embed extend.lua
	extend string
	//go:embed complete.lua
	complete string
	//go:embed retry.lua
	retry string
	//go:embed release.lua
	release string
	//go:embed promote.lua
	promote string
	//go:embed reap.lua
	reap string
	//go:embed cancel.lua
	cancel string
	//go:embed cancel_all.lua
	cancelAll string
	//go:embed requeue.lua
	requeue string
	//go:embed declare.lua
	declare string
	//go:embed cache_fill.lua
	cacheFill string
	//go:embed cache_fill_hashes.lua
	cacheFillHashes string
	//go:embed cache_server.lua
	cacheServer string
	//go:embed log_append.lua
	logAppend string
	//go:embed log_archived.lua
	logArchived string
	//go:embed log_claim.lua
	logClaim string
	//go:embed log_read_mark.lua
	logReadMark string
)

// The scripts, one per state move, each with the shared helpers in front.
var (
	// Admit writes a new job and puts it in its group's fair lane, or refuses
	// it; it may take a permit from a rate-limit bucket first, and append an
	// entry to its group's log.
	Admit = lib + permitBucket + logLib + admit
	// Claim leases pending jobs in fair-lane order.
	Claim = lib + claim
	// Extend renews a lease.
	Extend = lib + extend
	// Complete finishes an active job.
	Complete = lib + complete
	// Retry schedules a failed job again, or buries it.
	Retry = lib + retry
	// Release hands an active job back unfinished.
	Release = lib + release
	// Promote moves due delayed jobs into their lanes.
	Promote = lib + promote
	// Reap takes back jobs whose lease ran out.
	Reap = lib + reap
	// Cancel withdraws a job no worker holds.
	Cancel = lib + cancel
	// CancelAll withdraws every job of a group no worker holds, a bounded
	// number of entries per call.
	CancelAll = lib + cancelAll
	// Requeue revives a dead job.
	Requeue = lib + requeue
	// Declare registers a queue's job kinds and sets its dedup retention.
	// It moves no job, so it goes with the clock alone.
	Declare = clock + declare
	// CacheFill writes versioned cache entries that are newer than the cached
	// ones (package coherence runs it). It moves no job, so it goes without
	// the helpers.
	CacheFill = cacheLib + cacheFill
	// CacheFillHashes is CacheFill over several hashes of one slot in one
	// call, each answered on its own (package coherence runs it).
	CacheFillHashes = cacheLib + cacheFillHashes
	// CacheServer names the server holding a table's cache and says whether
	// the cache was healed on it (package coherence runs it).
	CacheServer = cacheServer
	// LogAppend appends entries to a group's log once per source version.
	// It moves no job, so it goes with the clock alone.
	LogAppend = clock + logLib + logAppend
	// LogArchived raises a group's archived position and trims its log to
	// its hot tail. It moves no job, so it goes with the clock alone.
	LogArchived = allowOOM + clock + logLib + logArchived
	// LogClaim claims groups' logs for one archiver a while. Its claims
	// expire by the server's clock (PX), so it needs none of its own.
	LogClaim = allowOOM + logClaim
	// LogReadMark is the write a replicated read of logs makes before
	// its WAIT.
	LogReadMark = allowOOM + logReadMark
)

//go:embed ratelimit.lua
var rateLimit string

// RateLimit takes a permit from a rate-limit bucket, or refuses. It moves no job,
// so it goes without the job helpers.
var RateLimit = clock + permitBucket + rateLimit

var (
	//go:embed seat_take.lua
	seatTake string
	//go:embed seat_renew.lua
	seatRenew string
)

// Seat sets cap what holders keep open at once across processes (each
// seat expires unless its holder renews it). They move no job, so they go
// with the clock alone.
var (
	// SeatTake takes a seat in every set given, or in none.
	SeatTake = clock + seatTake
	// SeatRenew puts seats' expiry a ttl from now, seating their holders
	// again where their sets lost them.
	SeatRenew = clock + seatRenew
	//go:embed ownership_acquire.lua
	ownershipAcquire string
	//go:embed ownership_extend.lua
	ownershipExtend string
	//go:embed ownership_release.lua
	ownershipRelease string
	//go:embed ownership_read.lua
	ownershipRead string
	//go:embed ownership_roster.lua
	ownershipRoster string
)

// A queue's ownership lease (one holder at a time, under a fencing token
// kept beside it) and the roster of workers ownerships are spread over.
// They move no job, so they go with the clock alone.
var (
	// OwnershipAcquire takes a queue's ownership lease under a new token
	// when it is free or expired.
	OwnershipAcquire = clock + ownershipAcquire
	// OwnershipExtend renews the lease for its holder and token.
	OwnershipExtend = clock + ownershipExtend
	// OwnershipRelease gives the lease up.
	OwnershipRelease = ownershipRelease
	// OwnershipRead reads the lease's holder, token and deadline.
	OwnershipRead = clock + ownershipRead
	// OwnershipRoster keeps the roster of live workers.
	OwnershipRoster = clock + ownershipRoster
)
