package tftext

// This file reads the resource counts from Terraform's summary lines, where
// no machine-readable form has them (a binary without -json, a remote run's
// log).

import (
	"regexp"
	"strconv"
)

var (
	planSummaryRE = regexp.MustCompile(`Plan: (\d+) to add, (\d+) to change, (\d+) to destroy`)
	resourcesRE   = regexp.MustCompile(`(?m)^.*complete! Resources: (.*)$`)
	countRE       = regexp.MustCompile(`(\d+) (added|changed|destroyed)`)
)

// PlanCounts reads "Plan: X to add, Y to change, Z to destroy." from a
// plan's text.
func PlanCounts(text string) (add, change, destroy int) {
	return SummaryCounts(text, planSummaryRE)
}

// SummaryCounts reads the resource counts from the first summary line of
// text that re matches: its first three groups are the numbers added,
// changed and destroyed. 0s without a match.
func SummaryCounts(text string, re *regexp.Regexp) (add, change, destroy int) {
	m := re.FindStringSubmatch(text)
	if m == nil {
		return 0, 0, 0
	}
	add, _ = strconv.Atoi(m[1])
	change, _ = strconv.Atoi(m[2])
	destroy, _ = strconv.Atoi(m[3])
	return add, change, destroy
}

// Completed reports whether out has Terraform's closing line of a
// successful apply or destroy ("Apply complete! Resources: ...").
func Completed(out string) bool { return resourcesRE.MatchString(out) }

// ApplyCounts reads "Apply complete! Resources: X added, Y changed, Z
// destroyed." (or "Destroy complete! Resources: Z destroyed.").
func ApplyCounts(out string) (add, change, destroy int) {
	ms := resourcesRE.FindAllStringSubmatch(out, -1)
	if ms == nil {
		return 0, 0, 0
	}
	for _, c := range countRE.FindAllStringSubmatch(ms[len(ms)-1][1], -1) {
		n, _ := strconv.Atoi(c[1])
		switch c[2] {
		case "added":
			add = n
		case "changed":
			change = n
		case "destroyed":
			destroy = n
		}
	}
	return add, change, destroy
}
