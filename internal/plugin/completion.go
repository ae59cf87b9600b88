package plugin

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
)

// The shell completion directives (cobra's, which kubectl's plugin
// completion and the scripts of completionScript read from the last line).
const (
	directiveDefault   = 0 // the shell may complete file names
	directiveNoFileCmp = 4
)

// commandHelp is each command's one-line description, for completion.
var commandHelp = map[string]string{
	"status": "conditions, instances, backups, TLS", "switchover": "make a standby the primary",
	"backup": "take a backup now", "verify-backup": "verify the latest base backup now",
	"rotate-ca": "rotate the Database's CA", "allow-restore": "let namespaces restore this Database's data",
	"restore": "print a Database recovering this one's backups", "psql": "psql as the application's role",
	"report": "write a support bundle", "completion": "print a shell completion script", "help": "the commands",
}

// commandFlags are each command's own flags, for completion.
var commandFlags = map[string][]string{
	"status":  {"--output"},
	"restore": {"--to", "--to-namespace", "--target-time", "--target-lsn"},
	"report":  {"--output", "--tail", "--operator-namespace"},
	"psql":    {"--exec"},
}

// Complete answers a shell's completion request the way cobra's
// __complete does and kubectl's plugin completion expects of
// kubectl_complete-dbkeeper: args are the words after the plugin's name,
// the last one the word being completed (empty for a new one); the
// candidates come one a line (a tab before a description), then
// ":<directive>". Databases, their pods and namespaces come from kubectl
// (nil: none), in the namespace of the words' -n.
func Complete(ctx context.Context, kubectl func(ctx context.Context, args []string) ([]byte, error), args []string) string {
	if len(args) == 0 {
		args = []string{""}
	}
	words, cur := args[:len(args)-1], args[len(args)-1]
	var g Globals
	var pos []string
	prevFlag := ""
	for _, w := range words {
		if prevFlag != "" {
			if set, ok := globalFlags[prevFlag]; ok {
				set(&g, w)
			}
			prevFlag = ""
			continue
		}
		if w == "--" && len(pos) > 0 {
			return finish(nil, directiveDefault) // psql's arguments
		}
		name, value, hasValue := splitFlag(w)
		switch {
		case name == "":
			pos = append(pos, w)
		case hasValue:
			if set, ok := globalFlags[name]; ok {
				set(&g, value)
			}
		case takesValue(name):
			prevFlag = name
		}
		if len(pos) >= 2 && pos[0] == "psql" {
			return finish(nil, directiveDefault) // after NAME, psql's own arguments
		}
	}
	var kflags []string
	for flag, v := range map[string]string{"--namespace": g.Namespace, "--kubeconfig": g.Kubeconfig, "--context": g.Context} {
		if v != "" {
			kflags = append(kflags, flag+"="+v)
		}
	}
	sort.Strings(kflags)
	names := func(args ...string) []string {
		if kubectl == nil {
			return nil
		}
		out, err := kubectl(ctx, append(append(args, "-o", "name", "--request-timeout=5s"), kflags...))
		if err != nil {
			return nil
		}
		var list []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if _, n, ok := strings.Cut(l, "/"); ok {
				list = append(list, n)
			}
		}
		return list
	}
	cmd := ""
	if len(pos) > 0 {
		cmd = pos[0]
	}
	switch prevFlag {
	case "n", "namespace", "to-namespace", "namespace-of-new", "operator-namespace":
		return finish(filter(names("get", "namespaces"), cur), directiveNoFileCmp)
	case "context":
		return finish(nil, directiveNoFileCmp)
	case "kubeconfig":
		return finish(nil, directiveDefault)
	case "o", "output":
		if cmd == "status" {
			return finish(filter([]string{"text", "json"}, cur), directiveNoFileCmp)
		}
		return finish(nil, directiveDefault) // report's file
	case "":
	default:
		return finish(nil, directiveNoFileCmp) // a value to type
	}
	if strings.HasPrefix(cur, "-") {
		flags := append(slices.Clone(commandFlags[cmd]), "--namespace", "--kubeconfig", "--context", "--help")
		return finish(filter(flags, cur), directiveNoFileCmp)
	}
	switch n := len(pos); {
	case n == 0:
		var cands []string
		for c, help := range commandHelp {
			cands = append(cands, c+"\t"+help)
		}
		sort.Strings(cands)
		return finish(filter(cands, cur), directiveNoFileCmp)
	case cmd == "completion" && n == 1:
		return finish(filter([]string{"bash", "zsh"}, cur), directiveNoFileCmp)
	case cmd == "help" || cmd == "completion":
		return finish(nil, directiveNoFileCmp)
	case n == 1:
		return finish(filter(names("get", "databases.database.dbkeeper.io"), cur), directiveNoFileCmp)
	case cmd == "switchover" && n == 2:
		return finish(filter(names("get", "pods", "--selector=app.kubernetes.io/instance="+pos[1]+",app.kubernetes.io/component=database"), cur), directiveNoFileCmp)
	case cmd == "allow-restore":
		return finish(filter(append(names("get", "namespaces"), "*"), cur), directiveNoFileCmp)
	}
	return finish(nil, directiveNoFileCmp)
}

// takesValue says whether the flag name (without dashes) takes a value.
func takesValue(name string) bool {
	switch name {
	case "exec", "h", "help":
		return false
	}
	return true
}

func filter(cands []string, prefix string) []string {
	var out []string
	for _, c := range cands {
		if strings.HasPrefix(c, prefix) {
			out = append(out, c)
		}
	}
	return out
}

func finish(cands []string, directive int) string {
	var b strings.Builder
	for _, c := range cands {
		b.WriteString(c + "\n")
	}
	fmt.Fprintf(&b, ":%d\n", directive)
	return b.String()
}

// completionScript writes the bash or zsh script that completes
// kubectl-dbkeeper by asking it (__complete).
func completionScript(out io.Writer, shell string) error {
	var script string
	switch shell {
	case "bash":
		script = bashCompletion
	case "zsh":
		script = zshCompletion
	default:
		return fmt.Errorf("%w: completion takes bash or zsh, not %q", ErrUsage, shell)
	}
	_, err := io.WriteString(out, script)
	return err
}

const bashCompletion = `# bash completion for kubectl-dbkeeper: source <(kubectl-dbkeeper completion bash)
# (kubectl dbkeeper <TAB> completes through kubectl_complete-dbkeeper on $PATH instead)
_kubectl_dbkeeper() {
    local cur="${COMP_WORDS[COMP_CWORD]}" line directive=0
    local -a comps=()
    while IFS='' read -r line; do
        case $line in
            :[0-9]*) directive=${line#:} ;;
            *) comps+=("${line%%$'\t'*}") ;;
        esac
    done < <("${COMP_WORDS[0]}" __complete "${COMP_WORDS[@]:1:COMP_CWORD-1}" "$cur" 2>/dev/null)
    COMPREPLY=("${comps[@]}")
    if [[ ${#comps[@]} -eq 0 && $((directive & 4)) -eq 0 ]]; then
        mapfile -t COMPREPLY < <(compgen -f -- "$cur")
    fi
}
complete -F _kubectl_dbkeeper kubectl-dbkeeper
`

const zshCompletion = `#compdef kubectl-dbkeeper
# zsh completion for kubectl-dbkeeper: source <(kubectl-dbkeeper completion zsh)
# (kubectl dbkeeper <TAB> completes through kubectl_complete-dbkeeper on $PATH instead)
_kubectl_dbkeeper() {
    local -a lines comps
    local line directive=0
    lines=("${(@f)$(${words[1]} __complete "${(@)words[2,CURRENT]}" 2>/dev/null)}")
    for line in $lines; do
        case $line in
            :[0-9]*) directive=${line#:} ;;
            *) comps+=("${${line//:/\\:}/$'\t'/:}") ;;
        esac
    done
    if (( ${#comps} )); then
        _describe 'kubectl-dbkeeper' comps
    elif (( (directive & 4) == 0 )); then
        _files
    fi
}
if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
    _kubectl_dbkeeper "$@"
else
    compdef _kubectl_dbkeeper kubectl-dbkeeper
fi
`
