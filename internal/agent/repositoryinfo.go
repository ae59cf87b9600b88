package agent

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// readInfo runs `pgbackrest info` of the archiver's repository.
func (a *Agent) readInfo(ctx context.Context) (*repositoryInfo, error) {
	out, err := a.pgbackrest(ctx, a.archive.configPath(), pgbackrestTimeout, "info", "--output=json")
	if err != nil {
		return nil, err
	}
	return parseInfo(out)
}

// repositoryInfo is what the archiver keeps of `pgbackrest info`.
type repositoryInfo struct {
	backups    []agentapi.BaseBackup
	archiveMin string
	archiveMax string
}

// parseInfo reads `pgbackrest info --output=json` of one stanza.
func parseInfo(out string) (*repositoryInfo, error) {
	var stanzas []struct {
		Archive []struct {
			Min string `json:"min"`
			Max string `json:"max"`
		} `json:"archive"`
		Backup []struct {
			Label   string `json:"label"`
			Type    string `json:"type"`
			Error   bool   `json:"error"`
			Archive struct {
				Start string `json:"start"`
				Stop  string `json:"stop"`
			} `json:"archive"`
			Info struct {
				Size       int64 `json:"size"`
				Repository struct {
					Delta int64 `json:"delta"`
				} `json:"repository"`
			} `json:"info"`
			LSN struct {
				Start string `json:"start"`
				Stop  string `json:"stop"`
			} `json:"lsn"`
			Timestamp struct {
				Start int64 `json:"start"`
				Stop  int64 `json:"stop"`
			} `json:"timestamp"`
		} `json:"backup"`
		Status struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"status"`
		Repo []struct {
			Status struct {
				Message string `json:"message"`
			} `json:"status"`
		} `json:"repo"`
	}
	if err := json.Unmarshal([]byte(out), &stanzas); err != nil {
		return nil, fmt.Errorf("reading pgbackrest info: %w", err)
	}
	if len(stanzas) != 1 {
		return nil, fmt.Errorf("pgbackrest info: %d stanzas, want 1", len(stanzas))
	}
	st := stanzas[0]
	// info exits 0 whatever happened: its status says (2: no backup yet).
	if st.Status.Code != 0 && st.Status.Code != 2 {
		msg := st.Status.Message
		for _, r := range st.Repo {
			msg += ": " + r.Status.Message
		}
		return nil, fmt.Errorf("pgbackrest info: %s", msg)
	}
	info := &repositoryInfo{}
	for _, ar := range st.Archive {
		if info.archiveMin == "" || ar.Min < info.archiveMin {
			info.archiveMin = ar.Min
		}
		if ar.Max > info.archiveMax {
			info.archiveMax = ar.Max
		}
	}
	for _, b := range st.Backup {
		if b.Error {
			continue
		}
		info.backups = append(info.backups, agentapi.BaseBackup{
			Label: b.Label, Type: b.Type,
			Started:  metav1.Unix(b.Timestamp.Start, 0),
			Finished: metav1.Unix(b.Timestamp.Stop, 0),
			Size:     b.Info.Size, RepositorySize: b.Info.Repository.Delta,
			StartLSN: b.LSN.Start, StopLSN: b.LSN.Stop,
			StartWAL: b.Archive.Start, StopWAL: b.Archive.Stop,
		})
	}
	return info, nil
}
