package realnode

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Where a real node keeps what outlives its process: the lock that makes it
// the only one on the machine, and the journal of its changes to the host.
const (
	lockPath    = "/run/dbkeeper-node.lock"
	journalDir  = "/run/dbkeeper-node"
	journalPath = journalDir + "/state.json"
)

// journal records every change a real node makes to the host, each before
// it is made, so that teardown can undo exactly those: after Stop, after a
// failed Start, and after a crash of the owner (the next Start, or
// Cleanup, finds the journal of a dead owner and undoes it).
type journal struct {
	// Owner is the pid of the process that started the node.
	Owner int `json:"owner"`
	// Dir is the cluster directory (certificates, logs, kubelet root,
	// containerd state, volumes).
	Dir string `json:"dir"`
	// ContainerdRoot is containerd's root (the cached content store).
	ContainerdRoot string `json:"containerdRoot,omitempty"`
	// Keep leaves Dir in place at teardown (DBKEEPER_KEEP_CLUSTER).
	Keep bool `json:"keep,omitempty"`
	// Sysctls holds the values before the node changed them.
	Sysctls map[string]string `json:"sysctls,omitempty"`
	// NftTablesBefore lists the nftables tables ("family name") that
	// existed before the node started.
	NftTablesBefore []string `json:"nftTablesBefore,omitempty"`
	// Bridge is set once the bridge is about to be created.
	Bridge bool `json:"bridge,omitempty"`
	// Guard is set once the guard table is about to be loaded.
	Guard bool `json:"guard,omitempty"`
	// CreatedPaths are host paths the node's components create that did not
	// exist before (/run/containerd, /var/lib/cni, ...).
	CreatedPaths []string `json:"createdPaths,omitempty"`
	// CreatedCgroups are cgroup directories (kubepods in each hierarchy)
	// that did not exist before.
	CreatedCgroups []string `json:"createdCgroups,omitempty"`
	// Netns are the network namespaces of several nodes (ip netns), each
	// recorded before it is created.
	Netns []string `json:"netns,omitempty"`
	// Veths are the host ends of the nodes' veths on the bridge.
	Veths []string `json:"veths,omitempty"`
	// ContainerdRoots are the cached roots of further nodes' containerds
	// (the first node's is ContainerdRoot): teardown unmounts under them.
	ContainerdRoots []string `json:"containerdRoots,omitempty"`
	// Pids are the processes the node started, by name.
	Pids map[string]int `json:"pids,omitempty"`
	// Started is when the node started, for humans.
	Started time.Time `json:"started"`
}

// save writes the journal atomically.
func (j *journal) save() error {
	if err := os.MkdirAll(journalDir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", journalDir, err)
	}
	data, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the node journal: %w", err)
	}
	tmp := journalPath + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("writing the node journal: %w", err)
	}
	if err := os.Rename(tmp, journalPath); err != nil {
		return fmt.Errorf("writing the node journal: %w", err)
	}
	return nil
}

// record applies change to the journal and saves it: call it before the
// host change it describes.
func (j *journal) record(change func(*journal)) error {
	change(j)
	return j.save()
}

// recordPid adds a started process.
func (j *journal) recordPid(name string, pid int) error {
	return j.record(func(j *journal) {
		if j.Pids == nil {
			j.Pids = map[string]int{}
		}
		j.Pids[name] = pid
	})
}

// readJournal returns the journal on disk, or nil when there is none.
func readJournal() (*journal, error) {
	data, err := os.ReadFile(journalPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the node journal: %w", err)
	}
	j := &journal{}
	if err := json.Unmarshal(data, j); err != nil {
		return nil, fmt.Errorf("decoding the node journal %s: %w", journalPath, err)
	}
	return j, nil
}

// removeJournal deletes the journal once everything in it is undone.
func removeJournal() error {
	if err := os.RemoveAll(journalDir); err != nil {
		return fmt.Errorf("removing the node journal: %w", err)
	}
	return nil
}

// nodeLock is the machine-wide lock of the real node: an flock, which the
// kernel releases when its holder dies, so holding it proves that the
// owner of any journal found is gone.
type nodeLock struct{ f *os.File }

// errLocked is returned by tryLock while another process holds the lock.
var errLocked = errors.New("locked")

func tryLock() (*nodeLock, error) {
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", lockPath, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errLocked
		}
		return nil, fmt.Errorf("locking %s: %w", lockPath, err)
	}
	// For the message of a second Start: who holds it.
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return &nodeLock{f: f}, nil
}

// acquireLock takes the lock, waiting up to wait for it; it refuses with the
// holder's pid and how to stop it.
func acquireLock(wait time.Duration, say func(string)) (*nodeLock, error) {
	deadline := time.Now().Add(wait)
	announced := false
	for {
		l, err := tryLock()
		if !errors.Is(err, errLocked) {
			return l, err
		}
		owner := lockOwner()
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("another real-node cluster is running on this machine (pid %s, %s): "+
				"stop it (Ctrl-C, make demo-down, or kill %s), or run `make node-down` if it is stuck; "+
				"realnode.Options.LockWait makes cluster.Start wait for it", owner, lockPath, owner)
		}
		if !announced {
			say(fmt.Sprintf("waiting up to %s for the real node of pid %s to stop", wait.Round(time.Second), owner))
			announced = true
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func lockOwner() string {
	data, err := os.ReadFile(lockPath)
	if err != nil {
		return "unknown"
	}
	if s := strings.TrimSpace(string(data)); s != "" {
		return s
	}
	return "unknown"
}

func (l *nodeLock) release() {
	if l == nil || l.f == nil {
		return
	}
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	l.f.Close()
	l.f = nil
}

// newRealNodeDir creates a real node's directory: under /tmp like the fake
// node's; the journal names it exactly.
func newRealNodeDir() (string, error) {
	dir, err := os.MkdirTemp("", "dbkeeper-node-")
	if err != nil {
		return "", fmt.Errorf("creating the cluster directory: %w", err)
	}
	return filepath.Clean(dir), nil
}
