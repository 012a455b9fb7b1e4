package main

// Where a run puts its Foos, with -namespaces > 1: how its namespaces are
// named (-namespace-names) and how many Foos each holds (-big-namespace).
// Both decide how the sharded replicas' slots divide the work: the API
// server's hash of a namespace picks its slot, and a namespace is never
// split (docs/sharding.md, "Why the namespace").

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"

	"example.com/foo-controller/pkg/shard"
)

// The styles of -namespace-names.
const (
	// namesSequential: numbered as people number them, which the hash
	// crowds into one or two equal slots.
	namesSequential = "sequential"
	// namesLetters: team-a to team-z, then team-aa, as people letter them.
	namesLetters = "letters"
	// namesSpread: chosen so that every equal slot holds as many
	// (spreadNamespaces), the best case for equal slots.
	namesSpread = "spread"
)

var namespaceStyles = []string{namesSequential, namesLetters, namesSpread}

// spreadOverSlots is the number of equal slots -namespace-names=spread
// aims at without -shard-slots (a run with one leader): the count the
// docs advise replicas to start with.
const spreadOverSlots = 16

// benchLabel marks the namespaces the bench creates, for checkClean: the
// letters style's names do not start "bench-".
const benchLabel = "app.kubernetes.io/created-by"

// namespaceNames names count namespaces in style. The names depend on
// nothing else, so every row of a scale-out run and every repeat faces the
// same placement of namespaces over the slots; the bench never reuses one
// while its namespace still exists (checkClean refuses to start over
// leftovers, deleteNamespaces waits until they are gone). slots are the
// equal slots the spread style aims at.
func namespaceNames(style string, count int, slots shard.Slots) ([]string, error) {
	out := make([]string, 0, count)
	switch style {
	case namesSequential:
		// "bench-" keeps checkClean's test by name; zero-padded to the
		// count's width, as ns000 to ns099 are.
		width := len(strconv.Itoa(count))
		for i := range count {
			out = append(out, fmt.Sprintf("bench-%0*d", width, i))
		}
	case namesLetters:
		for i := range count {
			out = append(out, "team-"+letters(i))
		}
	case namesSpread:
		return spreadNamespaces("spread", count, slots)
	default:
		return nil, fmt.Errorf("no namespace names %q (want one of %v)", style, namespaceStyles)
	}
	return out, nil
}

// letters is i in bijective base 26, as spreadsheets name their columns:
// a to z, then aa, ab, ..., zz, aaa.
func letters(i int) string {
	var b []byte
	for i++; i > 0; i = (i - 1) / 26 {
		b = append(b, byte('a'+(i-1)%26))
	}
	slices.Reverse(b)
	return string(b)
}

// fooCounts splits n Foos over m namespaces. With big 0, evenly, the
// first n%m one more: what round-robin creates give. With big > 0,
// round(big·n) in the first and the rest evenly over the others. The
// counts sum to n exactly, so that converge waits for every Foo it made.
func fooCounts(n, m int, big float64) []int {
	out := make([]int, m)
	if m == 1 {
		out[0] = n
		return out
	}
	first, rest := 0, out
	if big > 0 {
		first = min(n, int(math.Round(big*float64(n))))
		out[0] = first
		rest = out[1:]
	}
	left := n - first
	for i := range rest {
		rest[i] = left / len(rest)
		if i < left%len(rest) {
			rest[i]++
		}
	}
	return out
}

// placement is where a run's Foos go.
type placement struct {
	// spaces are the run's namespaces; with -big-namespace, the first is
	// the big one.
	spaces []string
	// of is Foo i's namespace (Foo i is named foo-i).
	of []string
}

// placeFoos puts n Foos in spaces as fooCounts splits them. With no big
// namespace it is round-robin, as it always was. With one, each
// namespace's Foos are interleaved over the creates in proportion to its
// count, so that every namespace fills over the whole burst rather than
// one after another: the big one's slot is busy throughout, as a big
// namespace's would be.
func placeFoos(spaces []string, n int, big float64) placement {
	p := placement{spaces: spaces, of: make([]string, n)}
	if big == 0 || len(spaces) == 1 {
		for i := range n {
			p.of[i] = spaces[i%len(spaces)]
		}
		return p
	}
	type seat struct {
		at float64 // the middle of the Foo's share of its namespace's count
		ns int
	}
	order := make([]seat, 0, n)
	for j, c := range fooCounts(n, len(spaces), big) {
		for k := range c {
			order = append(order, seat{(float64(k) + 0.5) / float64(c), j})
		}
	}
	sort.SliceStable(order, func(a, b int) bool {
		if order[a].at != order[b].at {
			return order[a].at < order[b].at
		}
		return order[a].ns < order[b].ns
	})
	for i, s := range order {
		p.of[i] = spaces[s.ns]
	}
	return p
}

// describeNamespaces says how a run spread its Foos, for the tables'
// titles: "over 64 namespaces (bench-00 to bench-63; 50% of the Foos in
// the first)".
func describeNamespaces(h header) string {
	if h.Namespaces <= 1 {
		return "in one namespace"
	}
	var names string
	switch h.NamespaceNames {
	case namesSequential, namesLetters:
		all, _ := namespaceNames(h.NamespaceNames, h.Namespaces, 1)
		names = all[0] + " to " + all[len(all)-1]
	case namesSpread:
		names = "names spread over equal slots"
	default:
		names = h.NamespaceNames + " names"
	}
	if h.BigNamespace > 0 {
		names += fmt.Sprintf("; %.4g%% of the Foos in the first", 100*h.BigNamespace)
	}
	return fmt.Sprintf("over %d namespaces (%s)", h.Namespaces, names)
}
