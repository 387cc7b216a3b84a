package settlement

// TakeOverRetrying is the worker's take-over of an instrument, tried again
// while a stuck transaction blocks it.
var TakeOverRetrying = takeOver

// CoherenceIdlePoll is the idle poll of the coherence shards' claim loops.
const CoherenceIdlePoll = coherenceIdlePoll
