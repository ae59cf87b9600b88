package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/reference/manager-flags.md from the flag set")

// flagReference is the committed reference of the manager's flags.
const flagReference = "../../docs/reference/manager-flags.md"

// TestFlagReference keeps docs/reference/manager-flags.md what the manager's
// own flag set says: a flag added, renamed or re-described without `make
// docs` fails here.
func TestFlagReference(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "") // --manager-namespace defaults to it
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	bindFlags(fs)
	got := renderFlags(fs)
	if *update {
		if err := os.WriteFile(flagReference, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(flagReference)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != got {
		t.Errorf("%s is not the manager's flag set: run `make docs` and commit", flagReference)
	}
}

// renderFlags is the markdown reference of fs's flags, in the order flag
// sorts them.
func renderFlags(fs *flag.FlagSet) string {
	var b strings.Builder
	b.WriteString("# `manager` flags\n\n")
	b.WriteString("<!-- Generated from the manager's flag set by `make docs` (cmd/manager TestFlagReference); do not edit. -->\n\n")
	b.WriteString("The Helm chart sets them from its values ([the chart's README](../../config/charts/dbkeeper/README.md)); `manager --help` prints the same.\n\n")
	b.WriteString("| Flag | Default | Description |\n| --- | --- | --- |\n")
	fs.VisitAll(func(f *flag.Flag) {
		def := f.DefValue
		if def == "" {
			def = " "
		} else {
			def = "`" + def + "`"
		}
		usage := strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;", "\n", " ").Replace(f.Usage)
		fmt.Fprintf(&b, "| `--%s` | %s | %s |\n", f.Name, def, usage)
	})
	return b.String()
}
