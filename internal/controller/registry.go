// Package controller is the registry of dbkeeper's controllers: the
// Controller interface, the explicit list of them, the --controllers
// grammar, and the setup that runs the enabled ones and a stand-in for each
// disabled one.
package controller

import (
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/dbkeeper/dbkeeper/internal/controller/backup"
	"github.com/dbkeeper/dbkeeper/internal/controller/cleanup"
	"github.com/dbkeeper/dbkeeper/internal/controller/configuration"
	"github.com/dbkeeper/dbkeeper/internal/controller/extensions"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/controller/readiness"
	"github.com/dbkeeper/dbkeeper/internal/controller/replication"
	"github.com/dbkeeper/dbkeeper/internal/controller/roles"
	"github.com/dbkeeper/dbkeeper/internal/controller/secret"
	"github.com/dbkeeper/dbkeeper/internal/controller/service"
	"github.com/dbkeeper/dbkeeper/internal/controller/statefulset"
	"github.com/dbkeeper/dbkeeper/internal/controller/tls"
)

// Controller is one narrow controller of the manager: it reconciles one
// facet of every Database and writes one condition.
type Controller interface {
	// Name is the controller's name in --controllers.
	Name() string
	// ConditionType is the condition the controller owns.
	ConditionType() string
	// SetupWithManager registers the controller with the manager.
	SetupWithManager(mgr ctrl.Manager, o facet.Options) error
	// SetupDisabled registers what stands in for the controller when
	// --controllers switches it off.
	SetupDisabled(mgr ctrl.Manager, o facet.Options) error
}

// Facets are the controllers whose conditions the Ready summary reads, in
// the order it reads them.
func Facets() []Controller {
	return []Controller{statefulset.New(), service.New(), secret.New(), backup.New(), tls.New(), replication.New(), configuration.New(), roles.New(), extensions.New()}
}

// All is every controller of the manager.
func All() []Controller {
	return append(Facets(), cleanup.New(), readiness.New())
}

// Names lists the names of all controllers, in registry order.
func Names() []string {
	var names []string
	for _, c := range All() {
		names = append(names, c.Name())
	}
	return names
}

// Setup registers every enabled controller with the manager and a stand-in
// for every disabled one. o carries the manager-wide settings
// (MaxConcurrentReconciles, Engines); Setup fills in the rest from enabled.
func Setup(mgr ctrl.Manager, enabled Enabled, o facet.Options) error {
	o.WaitForFinalizer = enabled[cleanup.Name]
	o.Facets = nil
	for _, c := range Facets() {
		if enabled[c.Name()] {
			o.Facets = append(o.Facets, c.ConditionType())
		}
	}
	for _, c := range All() {
		setup, state := c.SetupWithManager, "enabled"
		if !enabled[c.Name()] {
			setup, state = c.SetupDisabled, "disabled"
		}
		if err := setup(mgr, o); err != nil {
			return fmt.Errorf("setting up %s controller (%s): %w", c.Name(), state, err)
		}
	}
	return nil
}
