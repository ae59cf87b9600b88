package agent

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestPgBackRestErrorsKeepTheirCause: archive-push wraps the store's
// error on indented lines below its own ("[103]: unable to find a valid
// repository"); the message keeps them (the backup controller names the
// cause from them), not the HINTs, and adds the store's error code.
func TestPgBackRestErrorsKeepTheirCause(t *testing.T) {
	paused := `2026-12-06 00:14:29.101 P00   INFO: archive-push command begin 2.55.1: [pg_wal/000000010000000000000005] --archive-async=n
2026-12-06 00:15:49.322 P00  ERROR: [103]: unable to find a valid repository:
                                    repo1: [FileReadError] unable to load info file '/dbkeeper/ns/db/u/archive/db/archive.info' or '/dbkeeper/ns/db/u/archive/db/archive.info.copy':
                                    FileReadError: timeout after 10000ms waiting for read from '198.18.0.1:40000'
                                    FileReadError: timeout after 10000ms waiting for read from '198.18.0.1:40000'
                                    HINT: archive.info cannot be opened but is required to push/get WAL segments.
2026-12-06 00:15:49.322 P00   INFO: archive-push command end: aborted with exception [103]
`
	msg := lastErrorIn(paused)
	assert.Contains(t, msg, "ERROR: [103]: unable to find a valid repository:")
	assert.Contains(t, msg, "timeout after 10000ms waiting for read")
	assert.NotContains(t, msg, "HINT")
	assert.NotContains(t, msg, "2026-12-06", "the log's timestamp")

	noBucket := `ERROR: [039]: HTTP request failed with 404 (Not Found):
       *** Path/Query ***:
       GET /no-such-bucket/?delimiter=%2F
       *** Response Content ***:
       <?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message></Error>`
	assert.Contains(t, pgbackrestError(noBucket, errors.New("exit status 39")), "NoSuchBucket")
	assert.Equal(t, "exit status 1", pgbackrestError("", errors.New("exit status 1")))
	assert.Empty(t, lastErrorIn("2026-12-06 P00   INFO: archive-push command end: completed successfully\n"))
}
