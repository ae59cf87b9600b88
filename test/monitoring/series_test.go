package monitoring_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// series is what a metric name may be asked for with: its labels.
type series map[string][]string

// instanceLabels are the labels the manager adds to every series it
// serves again from an instance's agent (dbkeeper_postgres_*,
// internal/instancemetrics).
var instanceLabels = []string{"namespace", "database", "pod"}

// scrapeLabels are the labels Prometheus adds to every series it scrapes
// from the manager (job and instance; the Prometheus Operator's endpoint,
// service and container), which a selector may match on too.
var scrapeLabels = []string{"job", "instance", "endpoint", "service", "container"}

// exposedSeries returns every metric the manager serves: the descriptors
// and metric options of the Go sources under internal/ (read with go/ast,
// so that a rule or a panel naming a series nobody exposes fails a test),
// the agents' dbkeeper_postgres_* with instanceLabels added.
func exposedSeries(t *testing.T, root string) series {
	t.Helper()
	fset := token.NewFileSet()
	var files []*ast.File
	dirOf := map[*ast.File]string{}
	err := filepath.WalkDir(filepath.Join(root, "internal"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !strings.Contains(string(src), "client_golang/prometheus") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			return err
		}
		files = append(files, f)
		dirOf[f] = filepath.Dir(path)
		return nil
	})
	if err != nil {
		t.Fatalf("reading the sources: %v", err)
	}
	// the string constants of each package, for names and labels given
	// as constants (instancemetrics.LabelNamespace)
	consts := map[string]constants{}
	for _, f := range files {
		dir := dirOf[f]
		if consts[dir] == nil {
			consts[dir] = constants{}
		}
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.CONST {
				continue
			}
			for _, spec := range gen.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						if v, ok := constants(nil).stringLit(vs.Values[i]); ok {
							consts[dir][n.Name] = v
						}
					}
				}
			}
		}
	}
	found := series{}
	for _, f := range files {
		c := consts[dirOf[f]]
		wrappers := c.descWrappers(f)
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			for name, labels := range c.metricsOfCall(call, wrappers) {
				found[name] = append(found[name], labels...)
			}
			return true
		})
	}
	for name := range found {
		if strings.HasPrefix(name, "dbkeeper_postgres_") {
			found[name] = append(found[name], instanceLabels...)
		}
	}
	if len(found) == 0 {
		t.Fatal("no metric found in the sources under internal/")
	}
	return found
}

// descWrapper is a function of the sources that returns
// prometheus.NewDesc(prefix+<argument name>, help, <argument labels>, nil),
// such as the agent's metricsDesc.
type descWrapper struct {
	prefix string
	// name and labels are the positions of the name's and the labels'
	// parameters; labels is -1 when the labels are not a parameter.
	name, labels int
	variadic     bool
}

// descWrappers finds the descWrappers declared in f, by function name.
func (c constants) descWrappers(f *ast.File) map[string]descWrapper {
	wrappers := map[string]descWrapper{}
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil || fn.Recv != nil {
			continue
		}
		params := map[string]int{}
		i := 0
		variadic := false
		for _, field := range fn.Type.Params.List {
			_, variadic = field.Type.(*ast.Ellipsis)
			for _, n := range field.Names {
				params[n.Name] = i
				i++
			}
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || !isPrometheus(call.Fun, "NewDesc") || len(call.Args) < 3 {
				return true
			}
			sum, ok := call.Args[0].(*ast.BinaryExpr)
			if !ok || sum.Op != token.ADD {
				return true
			}
			prefix, okPrefix := c.stringLit(sum.X)
			param, okParam := sum.Y.(*ast.Ident)
			if !okPrefix || !okParam {
				return true
			}
			w := descWrapper{prefix: prefix, name: params[param.Name], labels: -1}
			if id, ok := call.Args[2].(*ast.Ident); ok {
				if pos, ok := params[id.Name]; ok {
					w.labels = pos
					w.variadic = variadic && pos == i-1
				}
			}
			wrappers[fn.Name.Name] = w
			return false
		})
	}
	return wrappers
}

// metricsOfCall returns the metrics call defines, with their labels:
// prometheus.NewDesc with a literal name, a call of one of wrappers, or a
// prometheus.New*Vec / New* with literal options.
func (c constants) metricsOfCall(call *ast.CallExpr, wrappers map[string]descWrapper) map[string][]string {
	if id, ok := call.Fun.(*ast.Ident); ok {
		w, ok := wrappers[id.Name]
		if !ok || w.name >= len(call.Args) {
			return nil
		}
		name, ok := c.stringLit(call.Args[w.name])
		if !ok {
			return nil
		}
		var labels []string
		switch {
		case w.labels < 0 || w.labels >= len(call.Args):
		case w.variadic:
			for _, a := range call.Args[w.labels:] {
				if l, ok := c.stringLit(a); ok {
					labels = append(labels, l)
				}
			}
		default:
			labels = c.stringsOf(call.Args[w.labels])
		}
		return map[string][]string{w.prefix + name: labels}
	}
	if isPrometheus(call.Fun, "NewDesc") && len(call.Args) >= 3 {
		if name, ok := c.stringLit(call.Args[0]); ok {
			return map[string][]string{name: c.stringsOf(call.Args[2])}
		}
		return nil
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || !isPrometheus(call.Fun, sel.Sel.Name) || !strings.HasPrefix(sel.Sel.Name, "New") || len(call.Args) == 0 {
		return nil
	}
	opts, ok := call.Args[0].(*ast.CompositeLit)
	if !ok {
		return nil
	}
	var parts []string
	kind := ""
	if t, ok := opts.Type.(*ast.SelectorExpr); ok {
		kind = t.Sel.Name
	}
	for _, key := range []string{"Namespace", "Subsystem", "Name"} {
		for _, e := range opts.Elts {
			kv, ok := e.(*ast.KeyValueExpr)
			if k, isIdent := kv.Key.(*ast.Ident); ok && isIdent && k.Name == key {
				if v, ok := c.stringLit(kv.Value); ok && v != "" {
					parts = append(parts, v)
				}
			}
		}
	}
	if len(parts) == 0 {
		return nil
	}
	var labels []string
	if len(call.Args) > 1 {
		labels = c.stringsOf(call.Args[1])
	}
	name := strings.Join(parts, "_")
	out := map[string][]string{}
	switch kind {
	case "HistogramOpts":
		out[name+"_bucket"] = append(slices.Clone(labels), "le")
		out[name+"_sum"], out[name+"_count"] = labels, labels
	case "SummaryOpts":
		out[name] = append(slices.Clone(labels), "quantile")
		out[name+"_sum"], out[name+"_count"] = labels, labels
	default:
		out[name] = labels
	}
	return out
}

// isPrometheus reports whether fun is prometheus.<name>.
func isPrometheus(fun ast.Expr, name string) bool {
	sel, ok := fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != name {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "prometheus"
}

// constants are the string constants of a package, by name.
type constants map[string]string

// stringLit is the value of a string literal, or of one of c.
func (c constants) stringLit(e ast.Expr) (string, bool) {
	if id, ok := e.(*ast.Ident); ok {
		v, ok := c[id.Name]
		return v, ok
	}
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// stringsOf is the strings of a []string{...} literal.
func (c constants) stringsOf(e ast.Expr) []string {
	lit, ok := e.(*ast.CompositeLit)
	if !ok {
		return nil
	}
	var out []string
	for _, el := range lit.Elts {
		if s, ok := c.stringLit(el); ok {
			out = append(out, s)
		}
	}
	return out
}

// checkSelectors reports, as test errors prefixed where, the problems
// selectorProblems finds in expr, and returns the names it selects.
func checkSelectors(t *testing.T, s series, where, expr string) []string {
	t.Helper()
	names, problems := selectorProblems(s, expr)
	for _, p := range problems {
		t.Errorf("%s: %s", where, p)
	}
	return names
}

// selectorProblems returns the metrics expr selects, and what is wrong
// with them: a metric s does not have, a label matched that the metric
// does not carry, no series at all.
func selectorProblems(s series, expr string) (names, problems []string) {
	sels, err := selectors(expr)
	if err != nil {
		return nil, []string{fmt.Sprintf("%v in %q", err, expr)}
	}
	if len(sels) == 0 {
		problems = append(problems, fmt.Sprintf("%q selects no series", expr))
	}
	for _, sel := range sels {
		names = append(names, sel.name)
		labels, ok := s[sel.name]
		if !ok {
			problems = append(problems, sel.name+" is a series nobody exposes (no metric of internal/ has that name)")
			continue
		}
		for _, l := range sel.labels {
			if !slices.Contains(labels, l) && !slices.Contains(scrapeLabels, l) {
				problems = append(problems, fmt.Sprintf("%s has no label %s (it has %s)", sel.name, l, strings.Join(labels, ", ")))
			}
		}
	}
	return names, problems
}

// selector is a metric name of a PromQL expression and the label names
// its matchers name.
type selector struct {
	name   string
	labels []string
}

// promqlKeywords are the PromQL words that are not metric names when not
// followed by a parenthesis: binary operators, modifiers, aggregations
// (whose by/without clause may come before their parenthesis), numbers.
var promqlKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
	"limitk": true, "limit_ratio": true, "start": true, "end": true, "inf": true, "nan": true,
	"Inf": true, "NaN": true,
}

// labelLists are the words followed by a parenthesised list of labels.
var labelLists = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

// selectors lexes a PromQL expression far enough to find its series
// selectors: identifiers that are neither keywords nor called, outside
// label lists, matchers, ranges and strings. (The Prometheus parser itself
// would pull its dependencies, newer than this module's, into go.mod;
// promtool check rules parses the rules for real.)
func selectors(expr string) ([]selector, error) {
	toks, err := lex(expr)
	if err != nil {
		return nil, err
	}
	var out []selector
	for i := 0; i < len(toks); i++ {
		tok := toks[i]
		next := func() string {
			if i+1 < len(toks) {
				return toks[i+1].text
			}
			return ""
		}
		switch {
		case tok.kind == tokIdent && labelLists[tok.text] && next() == "(":
			i = skipGroup(toks, i+1, "(", ")")
		case tok.kind == tokIdent && (promqlKeywords[tok.text] || next() == "("):
		case tok.kind == tokIdent:
			sel := selector{name: tok.text}
			if next() == "{" {
				end := skipGroup(toks, i+1, "{", "}")
				sel.labels = matcherLabels(toks[i+2 : end])
				i = end
			}
			out = append(out, sel)
		case tok.text == "{":
			// a selector without a metric name ({__name__=...}): none here
			return nil, fmt.Errorf("a selector without a metric name")
		case tok.text == "[":
			i = skipGroup(toks, i, "[", "]")
		}
	}
	return out, nil
}

// matcherLabels are the label names of the matchers between { and }.
func matcherLabels(toks []lexToken) []string {
	var labels []string
	for i, tok := range toks {
		if tok.kind == tokIdent && (i == 0 || toks[i-1].text == ",") {
			labels = append(labels, tok.text)
		}
	}
	return labels
}

// skipGroup returns the position of the close token matching the open
// token at toks[i].
func skipGroup(toks []lexToken, i int, open, close string) int {
	depth := 0
	for ; i < len(toks); i++ {
		switch toks[i].text {
		case open:
			depth++
		case close:
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return len(toks) - 1
}

type tokKind int

const (
	tokIdent tokKind = iota
	tokNumber
	tokString
	tokPunct
)

type lexToken struct {
	kind tokKind
	text string
}

// lex splits a PromQL expression into identifiers, numbers (durations
// too), strings and punctuation, dropping comments and spaces.
func lex(s string) ([]lexToken, error) {
	var toks []lexToken
	isIdentStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isDigit := func(c byte) bool { return c >= '0' && c <= '9' }
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(s) && s[j] != c {
				if s[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			if j >= len(s) {
				return nil, fmt.Errorf("an unterminated string at %d", i)
			}
			toks = append(toks, lexToken{tokString, s[i : j+1]})
			i = j + 1
		case isIdentStart(c):
			j := i
			for j < len(s) && (isIdentStart(s[j]) || isDigit(s[j])) {
				j++
			}
			toks = append(toks, lexToken{tokIdent, s[i:j]})
			i = j
		case isDigit(c) || c == '.' && i+1 < len(s) && isDigit(s[i+1]):
			j := i
			for j < len(s) && (isDigit(s[j]) || isIdentStart(s[j]) || s[j] == '.' ||
				(s[j] == '+' || s[j] == '-') && (s[j-1] == 'e' || s[j-1] == 'E')) {
				j++
			}
			toks = append(toks, lexToken{tokNumber, s[i:j]})
			i = j
		default:
			toks = append(toks, lexToken{tokPunct, string(c)})
			i++
		}
	}
	return toks, nil
}

// TestSelectors: the lexer finds the series of expressions like the
// rules', and nothing else.
func TestSelectors(t *testing.T) {
	for expr, want := range map[string][]selector{
		`max by (namespace, database, pod) (dbkeeper_postgres_up) == 0`: {{name: "dbkeeper_postgres_up"}},
		`sum without (state) (rate(a_total{x="1", y=~"a,b"}[5m] offset 1h)) / on (pod) group_left (role) b > 1.5e+09 # threshold: c`: {
			{name: "a_total", labels: []string{"x", "y"}}, {name: "b"}},
		`label_replace(m, "database", "$1", "name", "(.*)") and on() vector(1)`: {{name: "m"}},
		`predict_linear(free[6h:1m], 86400) < 0 unless count(up) > 1`:           {{name: "free"}, {name: "up"}},
		`topk by (pod) (3, x)`: {{name: "x"}},
	} {
		got, err := selectors(expr)
		if err != nil {
			t.Errorf("%s: %v", expr, err)
			continue
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("selectors(%q) = %v, want %v", expr, got, want)
		}
	}
}

// TestExposedSeries: the inventory of what the manager serves finds the
// agent's descriptors (through its metricsDesc) with their labels, the
// backup controller's, and the scrapes' (labels given as constants).
func TestExposedSeries(t *testing.T) {
	s := exposedSeries(t, repoRoot(t))
	for name, want := range map[string][]string{
		"dbkeeper_postgres_up":                                       instanceLabels,
		"dbkeeper_postgres_replication_lag_bytes":                    append([]string{"application_name", "position"}, instanceLabels...),
		"dbkeeper_postgres_checkpoints_total":                        append([]string{"kind"}, instanceLabels...),
		"dbkeeper_database_last_successful_backup_timestamp_seconds": {"namespace", "name"},
		"dbkeeper_instance_scrape_up":                                instanceLabels,
	} {
		got, ok := s[name]
		if !ok {
			t.Errorf("%s not found", name)
			continue
		}
		for _, l := range want {
			if !slices.Contains(got, l) {
				t.Errorf("%s: no label %s in %v", name, l, got)
			}
		}
	}
}

// TestSelectorProblems: a misspelt series or label is caught.
func TestSelectorProblems(t *testing.T) {
	s := series{"dbkeeper_postgres_up": instanceLabels}
	for expr, want := range map[string]string{
		`dbkeeper_postgres_up{pod="a"} == 0`:                     "",
		`dbkeeper_postgres_upp == 0`:                             "dbkeeper_postgres_upp is a series nobody exposes",
		`dbkeeper_postgres_up{role="primary"}`:                   "dbkeeper_postgres_up has no label role",
		`max by (namespace) (dbkeeper_postgres_up{job="x"}) > 1`: "",
		`vector(1)`: "selects no series",
	} {
		_, problems := selectorProblems(s, expr)
		got := strings.Join(problems, "; ")
		if want == "" && got != "" || !strings.Contains(got, want) {
			t.Errorf("selectorProblems(%q) = %q, want %q", expr, got, want)
		}
	}
}
