package controller

import (
	"fmt"
	"slices"
	"strings"
)

// Enabled says, by name, whether each controller runs: what --controllers
// asked for.
type Enabled map[string]bool

// Names lists the enabled controllers in the order of known.
func (s Enabled) Names(known []string) []string {
	var out []string
	for _, n := range known {
		if s[n] {
			out = append(out, n)
		}
	}
	return out
}

// ParseControllers reads the --controllers flag with the grammar of
// kube-controller-manager and cert-manager: "*" enables every controller,
// "name" enables one, "-name" disables one (and wins over "*" and "name").
// A list of only "-name" entries implies "*"; an empty list means "*".
// Unknown names are an error that lists the valid ones.
func ParseControllers(value string, known []string) (Enabled, error) {
	items := strings.Split(value, ",")
	if strings.TrimSpace(value) == "" {
		items = []string{"*"}
	}
	all, onlyDisables := false, true
	enable, disable := Enabled{}, Enabled{}
	for _, raw := range items {
		item := strings.TrimSpace(raw)
		name, off := strings.CutPrefix(item, "-")
		switch {
		case item == "*":
			all, onlyDisables = true, false
			continue
		case name == "" || name == "*":
			return nil, fmt.Errorf("invalid entry %q in --controllers: use *, a controller name, or -name to disable one; valid controllers are %s",
				item, strings.Join(known, ", "))
		case !slices.Contains(known, name):
			return nil, fmt.Errorf("unknown controller %q in --controllers: valid controllers are %s (and * for all of them)",
				name, strings.Join(known, ", "))
		case off:
			disable[name] = true
		default:
			enable[name] = true
			onlyDisables = false
		}
	}
	set := Enabled{}
	for _, n := range known {
		set[n] = (all || onlyDisables || enable[n]) && !disable[n]
	}
	return set, nil
}
