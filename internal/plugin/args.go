package plugin

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Globals are the flags of every command, accepted before the command and
// after it (up to "--", and for psql up to the Database's name, after
// which everything is psql's).
type Globals struct {
	// Namespace is -n/--namespace: the Databases' namespace (default: the
	// kubeconfig context's).
	Namespace string
	// Kubeconfig is --kubeconfig, Context --context.
	Kubeconfig string
	Context    string
	// Help is -h/--help.
	Help bool
}

// globalFlags are the flags of Globals that take a value.
var globalFlags = map[string]func(*Globals, string){
	"n":          func(g *Globals, v string) { g.Namespace = v },
	"namespace":  func(g *Globals, v string) { g.Namespace = v },
	"kubeconfig": func(g *Globals, v string) { g.Kubeconfig = v },
	"context":    func(g *Globals, v string) { g.Context = v },
}

// ParseGlobals takes the global flags out of args, wherever they are
// before "--" (and, for psql, before the Database's name), and returns
// the command line left: the command, its arguments and its own flags.
func ParseGlobals(args []string) (Globals, []string, error) {
	var g Globals
	var rest []string
	command, positional := "", 0
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || (command == "psql" && positional >= 2) {
			return g, append(rest, args[i:]...), nil
		}
		if a == "-h" || a == "--help" || a == "-help" {
			g.Help = true
			continue
		}
		name, value, hasValue := splitFlag(a)
		set, ok := globalFlags[name]
		switch {
		case name != "" && ok:
			if !hasValue {
				if i+1 >= len(args) {
					return g, nil, fmt.Errorf("%w: flag %s needs a value", ErrUsage, a)
				}
				i++
				value = args[i]
			}
			set(&g, value)
		case name != "" && command == "":
			return g, nil, fmt.Errorf("%w: unknown flag %s (a command's own flags go after the command)", ErrUsage, a)
		default:
			if name == "" {
				if command == "" {
					command = a
				}
				positional++
			}
			rest = append(rest, a)
		}
	}
	return g, rest, nil
}

// splitFlag is the name and value of a flag argument (-n, --namespace=x,
// -nshop, the way kubectl takes them), or "" when a is no flag.
func splitFlag(a string) (name, value string, hasValue bool) {
	if len(a) < 2 || a[0] != '-' || a == "-" {
		return "", "", false
	}
	name = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
	if n, v, ok := strings.Cut(name, "="); ok {
		return n, v, true
	}
	// -nshop, -ojson: a one-letter flag glued to its value
	if !strings.HasPrefix(a, "--") && len(name) > 1 && (name[0] == 'n' || name[0] == 'o') && !slices.Contains(longNames, name) {
		return name[:1], name[1:], true
	}
	return name, "", false
}

// longNames are the flags a single dash may spell in full (the flag
// package takes -namespace as --namespace).
var longNames = []string{"namespace", "namespace-of-new", "output", "operator-namespace"}

// options are the commands' own flags.
type options struct {
	output     string // status: text or json; report: the file
	to         string // restore
	toNS       string
	targetTime string
	targetLSN  string
	tail       int64 // report
	operatorNS string
	exec       bool // psql
}

// flagSet is the flag set of a command, writing into o.
func flagSet(cmd string, o *options) *flag.FlagSet {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	switch cmd {
	case "status":
		fs.StringVar(&o.output, "output", "text", "text or json")
		fs.StringVar(&o.output, "o", "text", "short for --output")
	case "restore":
		fs.StringVar(&o.to, "to", "", "the new Database's name")
		fs.StringVar(&o.toNS, "to-namespace", "", "the new Database's namespace (default: the source's)")
		fs.StringVar(&o.toNS, "namespace-of-new", "", "same as --to-namespace")
		fs.StringVar(&o.targetTime, "target-time", "", "recover to this commit time (RFC 3339)")
		fs.StringVar(&o.targetLSN, "target-lsn", "", "recover to this WAL position")
	case "report":
		fs.StringVar(&o.output, "output", "", "the bundle's file (default NAME-report-TIME.tar.gz; - for stdout)")
		fs.StringVar(&o.output, "o", "", "short for --output")
		fs.Int64Var(&o.tail, "tail", 1000, "the last lines of each container's log")
		fs.StringVar(&o.operatorNS, "operator-namespace", "", "the operator's namespace (default: found by its labels)")
	case "psql":
		fs.BoolVar(&o.exec, "exec", false, "kubectl exec into the primary instead of a client pod")
	}
	return fs
}

// parse splits a command line (without the global flags) into the
// command, its positional arguments, its flags and, for psql, the
// arguments that go to psql.
func parse(args []string) (cmd string, pos []string, o options, extra []string, err error) {
	if len(args) == 0 {
		return "", nil, o, nil, fmt.Errorf("%w: no command", ErrUsage)
	}
	cmd, args = args[0], args[1:]
	c, ok := commands[cmd]
	if !ok {
		return "", nil, o, nil, fmt.Errorf("%w: unknown command %q", ErrUsage, cmd)
	}
	fs := flagSet(cmd, &o)
	if cmd == "psql" {
		// plugin flags before NAME; after it, everything is psql's
		if err := fs.Parse(args); err != nil {
			return "", nil, o, nil, fmt.Errorf("%w: %s: %w", ErrUsage, cmd, err)
		}
		if rest := fs.Args(); len(rest) > 0 {
			pos, extra = rest[:1], rest[1:]
			if len(extra) > 0 && extra[0] == "--" {
				extra = extra[1:]
			}
		}
	} else {
		if pos, err = parseInterleaved(fs, args); err != nil {
			return "", nil, o, nil, fmt.Errorf("%w: %s: %w", ErrUsage, cmd, err)
		}
	}
	if len(pos) < c.args {
		return "", nil, o, nil, fmt.Errorf("%w: %s needs %s", ErrUsage, cmd, c.what)
	}
	if c.max >= 0 && len(pos) > c.max {
		return "", nil, o, nil, fmt.Errorf("%w: %s takes %s, not %q", ErrUsage, cmd, c.what, strings.Join(pos[c.max:], " "))
	}
	return cmd, pos, o, extra, nil
}

// parseInterleaved parses flags anywhere among the positional arguments,
// as kubectl does (status orders -o json); after "--" everything is
// positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var tail []string
	args = slices.Clone(args)
	if i := slices.Index(args, "--"); i >= 0 {
		args, tail = args[:i], args[i+1:]
	}
	for i, a := range args {
		// -ojson: the flag package wants -o=json
		if name, value, ok := splitFlag(a); ok && len(name) == 1 && !strings.Contains(a, "=") {
			args[i] = "-" + name + "=" + value
		}
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return append(pos, tail...), nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}
