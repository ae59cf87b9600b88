package facet

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
)

type eventUpdate = event.UpdateEvent

// Disabled stands in for a facet controller that --controllers switched off:
// it writes the facet's condition as Unknown with reason ControllerDisabled,
// with the facet's own field manager, so that nobody mistakes a stale
// condition for a live one and the facet takes its entry back when enabled.
type Disabled struct {
	Client        client.Client
	Writer        *Writer
	ConditionType string
	// Consequence, when not empty, is appended to the condition's message:
	// what not having the controller means (no failover).
	Consequence string
}

// Reconcile implements reconcile.Reconciler.
func (d *Disabled) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	db := &dbv1.Database{}
	if err := d.Client.Get(ctx, req.NamespacedName, db); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !db.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	msg := "the controller of this condition is disabled with --controllers; nothing keeps this facet"
	if d.Consequence != "" {
		msg += "; " + d.Consequence
	}
	cond := conditions.Unknown(d.ConditionType, dbv1.ReasonControllerDisabled, msg)
	return ctrl.Result{}, d.Writer.ApplyCondition(ctx, db, cond, nil)
}

// SetupDisabled registers the stand-in of a disabled controller.
func SetupDisabled(mgr ctrl.Manager, controllerName, conditionType string, o Options) error {
	return SetupDisabledWith(mgr, controllerName, conditionType, "", o)
}

// SetupDisabledWith is SetupDisabled whose condition also says what having
// no controller means (Disabled.Consequence).
func SetupDisabledWith(mgr ctrl.Manager, controllerName, conditionType, consequence string, o Options) error {
	d := &Disabled{Client: mgr.GetClient(), Writer: NewWriter(mgr, controllerName), ConditionType: conditionType, Consequence: consequence}
	err := ctrl.NewControllerManagedBy(mgr).
		Named(controllerName+"-disabled").
		For(&dbv1.Database{}, ForDatabase()).
		WithOptions(ControllerOptions(o)).
		Complete(d)
	if err != nil {
		return fmt.Errorf("setting up disabled controller %s: %w", controllerName, err)
	}
	return nil
}
