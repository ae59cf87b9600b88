// Command node-down is `make node-down`: it undoes what a real node of
// test/framework/realnode left on this machine after its owner died (a
// killed test or demo): processes, mounts, cgroups, the bridge, nftables
// tables, sysctls and directories, as the node's journal records them. It
// refuses while a live node holds the lock, and does nothing when there is
// no journal.
package main

import (
	"fmt"
	"os"

	"github.com/dbkeeper/dbkeeper/test/framework/realnode"
)

func main() {
	if err := realnode.Cleanup(); err != nil {
		fmt.Fprintln(os.Stderr, "node-down:", err)
		os.Exit(1)
	}
	fmt.Println("node-down: no real node left on this machine")
}
