package tftext

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestSummarize(t *testing.T) {
	// Plain layout (-no-color), as Terraform 1.x prints it.
	plain := "There are some problems with the CLI configuration:\n╷\n│ Warning: Unable to open CLI configuration file\n│\n│ The CLI configuration file does not exist.\n╵\n\n" +
		"Error: Unsupported argument\n\n  on main.tf line 30, in module \"web\":\n  30:   foo = var.foo\n\n" +
		"An argument named \"foo\" is not expected here.\n\n" +
		"Error: Resource precondition failed\n\n  on ../mod/main.tf line 8, in resource \"terraform_data\" \"s\":\n" +
		"   8:       condition = length(var.services) < 0\n    ├────────────────\n    │ var.services is map of object with 1 element\n\n" +
		"this module always fails\nand says why\n\nsecond paragraph ignored\n" +
		"Error: Unsupported argument\n\n  on main.tf line 30, in module \"web\":\n  30:   foo = var.foo\n\n" +
		"An argument named \"foo\" is not expected here.\n"
	want := `Error: Unsupported argument: An argument named "foo" is not expected here.; ` +
		`Error: Resource precondition failed: this module always fails and says why`
	if got := Summarize(plain); got != want {
		t.Fatalf("plain:\n got %q\nwant %q", got, want)
	}

	// Boxed layout.
	boxed := "╷\n│ Error: Failed to query available provider packages\n│ \n│ Could not retrieve the list of available versions for provider\n│ hashicorp/aws: no available releases match\n╵\n╷\n│ Error: No detail\n╵\n"
	want = "Error: Failed to query available provider packages: Could not retrieve the list of available versions for provider hashicorp/aws: no available releases match; Error: No detail"
	if got := Summarize(boxed); got != want {
		t.Fatalf("boxed:\n got %q\nwant %q", got, want)
	}

	if got := Summarize("\n\nsomething odd happened\nmore\n"); got != "something odd happened" {
		t.Fatalf("fallback: %q", got)
	}
	if got := Summarize(""); got != "" {
		t.Fatalf("empty: %q", got)
	}
	long := "Error: Long\n\n" + strings.Repeat("é", 400) + "\n"
	if got := Summarize(long); !strings.HasSuffix(got, "...") || len(got) > 330 || !utf8.ValidString(got) {
		t.Fatalf("long detail: %q", got)
	}
}

func TestHeadline(t *testing.T) {
	stderr := "\n╷\n│ Error: local-exec provisioner error\n│ \n│   with terraform_data.rules,\n│   on main.tf line 9:\n│ \n│ Error running command 'echo x; exit 3': exit status 3. Output: x\n╵\n╷\n│ Error: local-exec provisioner error\n╵\nError: Invalid reference\n\n  Error: not a diagnostic\n"
	// A provisioner's detail without its command line: the cause, once
	// (the same diagnostic without detail is not repeated).
	if got, want := Headline(stderr), "Error: local-exec provisioner error: exit status 3. Output: x; Error: Invalid reference"; got != want {
		t.Fatalf("Headline = %q, want %q", got, want)
	}
	// A failed condition keeps its author's message: the summary alone
	// does not say what failed.
	cond := "Error: Resource precondition failed\n\n  on ../mod/main.tf line 8, in resource \"terraform_data\" \"s\":\n" +
		"   8:       condition = length(var.services) < 0\n    ├────────────────\n    │ var.services is map of object with 1 element\n\n" +
		"this module always fails\nand says why\n\nsecond paragraph ignored\n"
	if got, want := Headline(cond), "Error: Resource precondition failed: this module always fails and says why"; got != want {
		t.Fatalf("Headline = %q, want %q", got, want)
	}
	if Headline("plain failure") != "" {
		t.Fatal("a headline without diagnostics")
	}
}

func TestSummaryCounts(t *testing.T) {
	if a, c, d := PlanCounts("...\nPlan: 1 to add, 2 to change, 3 to destroy.\n"); a != 1 || c != 2 || d != 3 {
		t.Fatal(a, c, d)
	}
	all := regexp.MustCompile(`(?:Apply|Destroy) complete! Resources: (\d+) added, (\d+) changed, (\d+) destroyed`)
	if a, c, d := SummaryCounts("Apply complete! Resources: 4 added, 0 changed, 1 destroyed.\n", all); a != 4 || c != 0 || d != 1 {
		t.Fatal(a, c, d)
	}
	if a, c, d := SummaryCounts("Destroy complete! Resources: 5 destroyed.\n", all); a+c+d != 0 {
		t.Fatal(a, c, d)
	}
}
