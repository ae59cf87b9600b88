package helm

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/dbkeeper/dbkeeper/internal/controller"
)

// TestTemplateEveryControllerCanBeSwitchedOff: each controller of the
// manager's registry turns into "-name" in --controllers when its
// controllers.<name>.enabled is false (the chart's list had left out the
// configuration controller, whose switch then did nothing).
func TestTemplateEveryControllerCanBeSwitchedOff(t *testing.T) {
	if testing.Short() {
		t.Skip("runs helm; skipped under -short")
	}
	var sets, off []string
	for _, name := range controller.Names() {
		sets = append(sets, "controllers."+name+".enabled=false")
		off = append(off, "-"+name)
	}
	args := managerArgs(t, render(t, "--set", strings.Join(sets, ",")))
	assert.Contains(t, args, "--controllers=*,"+strings.Join(off, ","))
	assert.Contains(t, managerArgs(t, render(t, "--set", "controllers.roles.enabled=false")), "--controllers=*,-roles")
}

// TestTemplateAllowPrivilegedRoles: privileged roles (spec.roles[].superuser,
// replication, bypassrls) are off unless the chart's values turn them on.
func TestTemplateAllowPrivilegedRoles(t *testing.T) {
	if testing.Short() {
		t.Skip("runs helm; skipped under -short")
	}
	assert.Contains(t, managerArgs(t, render(t)), "--allow-privileged-roles=false")
	assert.Contains(t, managerArgs(t, render(t, "--set", "allowPrivilegedRoles=true")), "--allow-privileged-roles=true")
}
