package agent

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"k8s.io/client-go/rest"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// Config is what the agent runs with: its flags and environment.
type Config struct {
	// Listen is the address of the agent's endpoint.
	Listen string
	// PGData is the data directory ($PGDATA).
	PGData string
	// SocketDir is the server's unix socket directory; the agent connects
	// there as User.
	SocketDir string
	// Port is the local server's port (its socket's name, and the TCP port
	// it listens on).
	Port int
	// PrimaryPort is the port of PrimaryHost standbys stream from.
	PrimaryPort int
	// Command is the image's entrypoint and the server's arguments; the
	// agent appends the port, socket directory and, for a standby, the
	// streaming settings.
	Command []string

	// The environment (api.go names it).
	Pod                 string
	PodUID              string
	Token               string
	ReplicationPassword string
	PrimaryHost         string
	TLSDir              string
	// APITLSDir ($DBKEEPER_API_TLS_DIR, EnvAPITLSDir) holds the
	// endpoint's certificate when TLSDir is empty (see apiTLSDir).
	APITLSDir string
	// ClientCertAuth ($DBKEEPER_CLIENT_CERT_AUTH): no password logs in
	// the superuser or ReplicationUser over TCP (EnvClientCertAuth).
	ClientCertAuth bool
	// User is the superuser the agent connects as ($POSTGRES_USER), over
	// the socket; Password ($POSTGRES_PASSWORD) is offered when asked.
	User     string
	Password string

	// Namespace and LeaseName name the primary lease (EnvNamespace,
	// EnvLeaseName); without LeaseName the agent holds no lease.
	Namespace string
	LeaseName string
	// RestConfig reaches the API server for the lease; nil: the pod's
	// in-cluster configuration. Tests set it.
	RestConfig *rest.Config

	// Repository is where the instance archives WAL and takes base
	// backups (EnvRepository); nil: no continuous archiving.
	Repository *agentapi.Repository
	// RuntimeDir holds pgBackRest's configuration, logs and locks; empty:
	// a new temporary directory.
	RuntimeDir string

	// PeerDomain ($DBKEEPER_PEER_DOMAIN) makes a standby's DNS name,
	// <pod>.<PeerDomain>; empty: base backups are taken from the primary.
	PeerDomain string
	// BackupServerPort is the port of this instance's pgBackRest TLS
	// server and of its peers' (--pgbackrest-port).
	BackupServerPort int
	// PromoteTimeout is how long pg_promote waits for the end of recovery
	// (--promote-timeout, whole seconds, at least one).
	PromoteTimeout time.Duration
	// CustomQueries is the file of user-defined metric queries
	// (--custom-queries; the mounted ConfigMap's key in a pod).
	CustomQueries string

	// Peers, when set, says how to reach a standby (by pod name) instead
	// of <pod>.<PeerDomain>:BackupServerPort with this instance's data
	// directory, socket and port (--peers, a JSON object): the tests run
	// every instance on one host.
	Peers map[string]Peer

	// UpgradeFrom and UpgradeTo are the majors of an in-place major
	// upgrade (agentapi.EnvUpgradeFrom, EnvUpgradeTo); empty without one.
	UpgradeFrom string
	UpgradeTo   string

	// Args are the words the agent was started with, after `agent`: a
	// new binary's takeover check runs with them.
	Args []string
	// CheckTakeover (--check-takeover) makes Main check that this binary
	// could take over from the agent running with the same flags and
	// environment, print its build and exit (checkTakeover).
	CheckTakeover bool
}

// Peer is how the primary's pgBackRest reaches a standby for a base
// backup from it: its TLS server, by a name its certificate carries, and
// its server's files and socket there.
type Peer struct {
	Host      string `json:"host"`
	Port      int    `json:"port"`
	PGData    string `json:"pgdata"`
	SocketDir string `json:"socketDir"`
	PGPort    int    `json:"pgPort"`
}

// ParseFlags reads the agent's flags from args (the words after `agent`,
// the server's command after `--`) and its environment; bind, when set,
// adds more flags (the logging ones).
func ParseFlags(args []string, bind func(*flag.FlagSet)) (Config, error) {
	c := Config{}
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	if bind != nil {
		bind(fs)
	}
	fs.StringVar(&c.Listen, "listen", fmt.Sprintf(":%d", agentapi.Port), "Address of the agent's endpoint (HTTPS when $"+agentapi.EnvTLSDir+" or $"+agentapi.EnvAPITLSDir+" is set).")
	fs.StringVar(&c.SocketDir, "socket-dir", "/var/run/postgresql", "The server's unix socket directory.")
	fs.IntVar(&c.Port, "port", 5432, "The local server's port.")
	fs.IntVar(&c.PrimaryPort, "primary-port", 5432, "The port of $"+agentapi.EnvPrimaryHost+", which standbys stream from and clone.")
	fs.IntVar(&c.BackupServerPort, "pgbackrest-port", int(agentapi.BackupServerPort), "The port of the instances' pgBackRest TLS servers.")
	fs.StringVar(&c.CustomQueries, "custom-queries", filepath.Join(agentapi.CustomQueriesDir, agentapi.CustomQueriesFile), "The file of user-defined metric queries (spec.monitoring.customQueries), read at each scrape that asks for them.")
	fs.DurationVar(&c.PromoteTimeout, "promote-timeout", 60*time.Second, "How long pg_promote waits for the end of recovery (whole seconds).")
	fs.Func("peers", "A JSON object of pod name to {host, port, pgdata, socketDir, pgPort}: how to reach each standby for a base backup from it, instead of <pod>.$"+agentapi.EnvPeerDomain+" (tests).", func(v string) error {
		return json.Unmarshal([]byte(v), &c.Peers)
	})
	fs.BoolVar(&c.CheckTakeover, agentapi.CheckTakeoverFlag, false, "Check that this binary can take over from the agent running with the same flags and environment, print its build as JSON and exit.")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.Args = append([]string(nil), args...)
	c.Command = fs.Args()
	if len(c.Command) == 0 {
		return c, errors.New("agent: no server command: manager agent [flags] -- docker-entrypoint.sh postgres ...")
	}
	c.PGData = os.Getenv("PGDATA")
	if c.PGData == "" {
		return c, errors.New("agent: $PGDATA is not set")
	}
	c.Pod = os.Getenv(agentapi.EnvPodName)
	c.PodUID = os.Getenv(agentapi.EnvPodUID)
	c.Token = os.Getenv(agentapi.EnvToken)
	c.ReplicationPassword = os.Getenv(agentapi.EnvReplicationPassword)
	c.PrimaryHost = os.Getenv(agentapi.EnvPrimaryHost)
	c.TLSDir = os.Getenv(agentapi.EnvTLSDir)
	c.APITLSDir = os.Getenv(agentapi.EnvAPITLSDir)
	c.ClientCertAuth = c.TLSDir != "" && os.Getenv(agentapi.EnvClientCertAuth) == "true"
	c.PeerDomain = os.Getenv(agentapi.EnvPeerDomain)
	c.User = os.Getenv("POSTGRES_USER")
	if c.User == "" {
		c.User = "postgres"
	}
	c.Password = os.Getenv("POSTGRES_PASSWORD")
	c.Namespace = os.Getenv(agentapi.EnvNamespace)
	c.UpgradeFrom = os.Getenv(agentapi.EnvUpgradeFrom)
	c.UpgradeTo = os.Getenv(agentapi.EnvUpgradeTo)
	c.LeaseName = os.Getenv(agentapi.EnvLeaseName)
	if c.LeaseName != "" && c.Namespace == "" {
		return c, errors.New("agent: $" + agentapi.EnvLeaseName + " is set but $" + agentapi.EnvNamespace + " is not")
	}
	var repo agentapi.Repository
	if set, err := readEnvJSON(agentapi.EnvRepository, &repo); err != nil {
		return c, fmt.Errorf("agent: %w", err)
	} else if set {
		c.Repository = &repo
	}
	return c, nil
}

// Database is the name of the Database the instance belongs to: its pod's
// name without the ordinal the StatefulSet <database> gives it
// (<database>-<ordinal>); empty without a pod name.
func (c Config) Database() string {
	return podOrdinal.ReplaceAllString(c.Pod, "")
}

// podOrdinal is the ordinal that ends a StatefulSet's pod name.
var podOrdinal = regexp.MustCompile(`-[0-9]+$`)

// LogValues are the key/value pairs that name the instance in every line
// of its logs, the agent's and the server's: namespace, database and pod.
func (c Config) LogValues() []any {
	return []any{"namespace", c.Namespace, "database", c.Database(), "pod", c.Pod}
}

// apiTLSDir is where the endpoint's certificate, key and CA are: TLSDir
// when the server has TLS, else APITLSDir; empty: plain HTTP (a pod
// built before the endpoint always had TLS).
func (c Config) apiTLSDir() string {
	if c.TLSDir != "" {
		return c.TLSDir
	}
	return c.APITLSDir
}
