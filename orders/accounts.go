package orders

// The two accounts every ledger transaction that is not a trade touches.
const (
	// VenueAccount holds the liquidity orders settle against.
	VenueAccount = "ACC_0000000000000000000000000V"
	// ExternalAccount is the world outside the exchange: deposits come from it,
	// withdrawals go to it. It is the one account allowed below zero.
	ExternalAccount = "ACC_0000000000000000000000000X"
)
