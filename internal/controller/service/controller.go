// Package service is the controller of a Database's client Service and its
// headless governing Service. It owns the ServiceReady condition and
// status.endpoint.
package service

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"
	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// Name is the controller's name in --controllers.
const Name = "service"

// +kubebuilder:rbac:groups=database.dbkeeper.io,resources=databases,verbs=get;list;watch
// +kubebuilder:rbac:groups=database.dbkeeper.io,resources=databases/status,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Controller is the service controller.
type Controller struct{}

// New returns the service controller.
func New() Controller { return Controller{} }

// Name implements controller.Controller.
func (Controller) Name() string { return Name }

// ConditionType implements controller.Controller.
func (Controller) ConditionType() string { return dbv1.ConditionServiceReady }

// SetupWithManager implements controller.Controller.
func (c Controller) SetupWithManager(mgr ctrl.Manager, o facet.Options) error {
	r := &facet.Reconciler{
		Client:        mgr.GetClient(),
		Writer:        facet.NewWriter(mgr, Name),
		ConditionType: c.ConditionType(),
		Syncer:        &syncer{client: mgr.GetClient()},
		Options:       o,
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		For(&dbv1.Database{}, facet.ForDatabase()).
		Owns(&corev1.Service{}).
		WithOptions(facet.ControllerOptions(o)).
		Complete(r)
}

// SetupDisabled implements controller.Controller.
func (c Controller) SetupDisabled(mgr ctrl.Manager, o facet.Options) error {
	return facet.SetupDisabled(mgr, Name, c.ConditionType(), o)
}

type syncer struct {
	client client.Client
}

func (s *syncer) Sync(ctx context.Context, db *dbv1.Database) (facet.Outcome, error) {
	eng, err := engine.For(db.Spec.Engine)
	if err != nil {
		return facet.Outcome{}, reconcile.TerminalError(err)
	}
	for _, desired := range []*corev1ac.ServiceApplyConfiguration{
		resources.ClientService(db, eng),
		resources.HeadlessService(db, eng),
	} {
		if err := s.apply(ctx, desired); err != nil {
			return facet.Outcome{}, err
		}
	}
	cond := conditions.True(dbv1.ConditionServiceReady, dbv1.ReasonServicesReady,
		fmt.Sprintf("Services %s and %s are in place", resources.ClientServiceName(db), resources.HeadlessServiceName(db)))
	return facet.Outcome{
		Condition: cond,
		Status:    dbv1ac.DatabaseStatus().WithEndpoint(resources.Endpoint(db, eng.Port())),
	}, nil
}

func (s *syncer) apply(ctx context.Context, desired *corev1ac.ServiceApplyConfiguration) error {
	live := &corev1.Service{}
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: *desired.Namespace, Name: *desired.Name}, live); err != nil {
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("getting Service %s: %w", *desired.Name, err)
		}
		live = nil
	}
	wrote, err := apply.Apply(ctx, s.client, live, desired, facet.FieldOwner(Name))
	if err != nil {
		return fmt.Errorf("applying Service %s: %w", *desired.Name, err)
	}
	if wrote {
		log.FromContext(ctx).Info("Applied Service", "service", *desired.Name)
	}
	return nil
}

func (s *syncer) Carry(db *dbv1.Database) *dbv1ac.DatabaseStatusApplyConfiguration {
	if db.Status.Endpoint == "" {
		return nil
	}
	return dbv1ac.DatabaseStatus().WithEndpoint(db.Status.Endpoint)
}
