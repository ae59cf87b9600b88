package realnode

// What the external tests (package realnode_test, which use
// test/framework/faults, an importer of this package) need of the
// internal ones.
var (
	Baseline           = baseline
	AssertNothingLeft  = assertNothingLeft
	RealNodesOptions   = realNodesOptions
	AssertContainedAll = assertContainedAll
)
