package cli

import (
	"flag"
	"fmt"
	"strings"

	"github.com/agext/levenshtein"
)

// suggest returns the candidate closest to word, when it is close enough
// to be what was meant: at most 2 edits (a swap of two neighbouring
// letters counts as one), and fewer than half the word's length; ""
// otherwise. Of equally close candidates the first wins.
func suggest(word string, candidates []string) string {
	best, bestDist := "", 3
	for _, c := range candidates {
		d := distance(word, c)
		if d < bestDist && 2*d < len(word) {
			best, bestDist = c, d
		}
	}
	return best
}

// distance is the edit distance of a and b where swapping two neighbouring
// letters is one edit (the commonest typo), not two.
func distance(a, b string) int {
	d := levenshtein.Distance(a, b, nil)
	r := []rune(a)
	for i := 0; i+1 < len(r); i++ {
		if r[i] == r[i+1] {
			continue
		}
		r[i], r[i+1] = r[i+1], r[i]
		d = min(d, 1+levenshtein.Distance(string(r), b, nil))
		r[i], r[i+1] = r[i+1], r[i]
	}
	return d
}

// didYouMean is the hint line for a mistyped command ("" when nothing is
// close).
func didYouMean(word string, candidates []string) string {
	if s := suggest(word, candidates); s != "" {
		return fmt.Sprintf("Did you mean %q?", s)
	}
	return ""
}

// flagHint is the hint for a flag error of fs: for an unknown flag, the
// closest defined one ("Did you mean -auto-approve?"); "" otherwise.
func flagHint(fs *flag.FlagSet, err error) string {
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -")
	if !ok {
		return ""
	}
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	if s := suggest(strings.TrimPrefix(name, "-"), names); s != "" {
		return fmt.Sprintf("Did you mean -%s?", s)
	}
	return ""
}
