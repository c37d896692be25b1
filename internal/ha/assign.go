package ha

import (
	"math"
	"slices"
	"strings"
)

// Candidate is a member that tasks can be assigned to in spread mode, with
// its weight (instance.weight, default 1): a member of weight 2 gets about
// twice the tasks of a member of weight 1.
type Candidate struct {
	ID     string
	Weight float64
}

// Owner returns the member a task belongs to among candidates ("" when
// there is none): weighted rendezvous (highest random weight) hashing.
// Every instance computes the same answer from the same member list, with
// no coordination, and a change of the list moves only the tasks that must
// move: adding a member takes about 1/N of the tasks (those it now scores
// highest on), each from whichever member had them; removing one moves only
// its own tasks, spread over the others.
//
// The score of (task, member) is -w / ln(u), u being a hash of both mapped
// into (0, 1): the member with the highest score wins, ties (in practice
// never) go to the smallest id.
func Owner(task string, candidates []Candidate) string {
	best, bestScore := "", math.Inf(-1)
	for _, c := range candidates {
		w := c.Weight
		if w <= 0 {
			continue
		}
		s := -w / math.Log(unitHash(task, c.ID))
		if s > bestScore || (s == bestScore && strings.Compare(c.ID, best) < 0) {
			best, bestScore = c.ID, s
		}
	}
	return best
}

// Assign returns the owner of every task (Owner), by task name.
func Assign(tasks []string, candidates []Candidate) map[string]string {
	return AssignGroups(tasks, candidates, nil)
}

// AssignGroups is Assign where the tasks of one group have one owner: a
// task is placed by its group's name (group[task]; the task's own name
// when it has none). Chained tasks form a group (SpreadOptions.Group).
func AssignGroups(tasks []string, candidates []Candidate, group map[string]string) map[string]string {
	out := make(map[string]string, len(tasks))
	for _, t := range tasks {
		key := t
		if g, ok := group[t]; ok {
			key = g
		}
		out[t] = Owner(key, candidates)
	}
	return out
}

// unitHash maps (task, member) to a number in the open interval (0, 1):
// FNV-1a over both (a NUL between them, which neither name can hold in a
// way that makes two pairs collide) finished with splitmix64's mixer, so
// that similar names still get independent-looking values.
func unitHash(task, member string) float64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for i := 0; i < len(task); i++ {
		h = (h ^ uint64(task[i])) * prime
	}
	h = (h ^ 0) * prime
	for i := 0; i < len(member); i++ {
		h = (h ^ uint64(member[i])) * prime
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	// The top 53 bits, shifted off zero: (k + 0.5) / 2^53 is in (0, 1).
	return (float64(h>>11) + 0.5) / (1 << 53)
}

// sortedCandidates returns the candidates sorted by id (stable logs and
// tests).
func sortedCandidates(cs []Candidate) []Candidate {
	out := slices.Clone(cs)
	slices.SortFunc(out, func(a, b Candidate) int { return strings.Compare(a.ID, b.ID) })
	return out
}
