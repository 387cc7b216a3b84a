package orders_test

import (
	"testing"

	"github.com/ordergate/ordergate/orders"
)

func TestParseBalanceLineReadsTheHeadAndTheCarriedAmounts(t *testing.T) {
	cases := []struct {
		line string
		want orders.BalanceLine
		ok   bool
	}{
		{"balances:ACC_1:USD@7", orders.BalanceLine{Name: "balances:ACC_1:USD", Version: 7}, true},
		{"balances:ACC_1:USD@7 10.5 -0.25", orders.BalanceLine{Name: "balances:ACC_1:USD", Version: 7, Available: "10.5", Held: "-0.25", Carried: true}, true},
		// Amounts that are no decimals are not carried: the consumer reads the balance back.
		{"balances:ACC_1:USD@7 1e3 2", orders.BalanceLine{Name: "balances:ACC_1:USD", Version: 7}, true},
		{"balances:ACC_1:USD@7 10.5", orders.BalanceLine{Name: "balances:ACC_1:USD", Version: 7}, true},
		{"balances:ACC_1:USD@0", orders.BalanceLine{}, false},
		{"balances:ACC_1:USD@-3 1 2", orders.BalanceLine{}, false},
		{"balances:ACC_1:USD@x", orders.BalanceLine{}, false},
		{"balances:ACC_1:USD", orders.BalanceLine{}, false},
		{"@5", orders.BalanceLine{}, false},
		{"", orders.BalanceLine{}, false},
	}
	for _, c := range cases {
		got, ok := orders.ParseBalanceLine(c.line)
		if got != c.want || ok != c.ok {
			t.Errorf("ParseBalanceLine(%q) = %+v, %v; want %+v, %v", c.line, got, ok, c.want, c.ok)
		}
	}
}

func TestBalanceEntriesKeepAMalformedLineForTheConsumerToRefuse(t *testing.T) {
	// A line with no positive version keeps its whole text as its name, so
	// the relay never folds it under a good line's balance: it travels on
	// for the consumer to log and skip.
	entry := orders.OutboxEntry{Name: orders.BalancesWriteName, Payload: "balances:ACC_1:USD@7 10 0\nnot a line\nbalances:ACC_1:USD@0\nbalances:ACC_1:BTC@2"}
	got := orders.BalanceEntries(entry)
	want := []orders.OutboxEntry{
		{Name: "balances:ACC_1:USD", Version: 7, Payload: "balances:ACC_1:USD@7 10 0"},
		{Name: "not a line", Version: 0, Payload: "not a line"},
		{Name: "balances:ACC_1:USD@0", Version: 0, Payload: "balances:ACC_1:USD@0"},
		{Name: "balances:ACC_1:BTC", Version: 2, Payload: "balances:ACC_1:BTC@2"},
	}
	if len(got) != len(want) {
		t.Fatalf("BalanceEntries = %+v; want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d = %+v; want %+v", i, got[i], want[i])
		}
	}
	other := orders.OutboxEntry{Name: "balances:ACC_1:USD", Version: 3, Payload: "balances:ACC_1:USD@3"}
	if got := orders.BalanceEntries(other); len(got) != 1 || got[0] != other {
		t.Errorf("BalanceEntries of a balance's own row = %+v; want it alone", got)
	}
}
