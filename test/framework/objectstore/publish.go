package objectstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/test/framework"
)

// InClusterNamespace holds the Services Publish makes.
const InClusterNamespace = "objectstore"

// InClusterHost is the name Publish gives a store under the Service name
// service; start the store with it in Options.DNSNames so that its
// certificate carries it.
func InClusterHost(service string) string {
	return service + "." + InClusterNamespace + ".svc.cluster.local"
}

// Publish makes the store reachable from the pods of the cluster c under
// InClusterHost(service): a headless Service without a selector and an
// EndpointSlice naming the store's listen address (the node IP on the
// host's bridge), as a team publishes a store that runs outside the
// cluster. It returns the endpoint pods use, host:port.
func (s *Store) Publish(ctx context.Context, c client.Client, service string) (string, error) {
	host, portText, err := net.SplitHostPort(s.Endpoint)
	if err != nil {
		return "", err
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return "", fmt.Errorf("the store's port %q: %w", portText, err)
	}
	if net.ParseIP(host) == nil {
		return "", fmt.Errorf("the store listens on %s, not an IP address a pod can reach", s.Endpoint)
	}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: InClusterNamespace}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: InClusterNamespace, Name: service},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "https", Port: int32(port)}}}},
		&discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: InClusterNamespace, Name: service + "-host",
				Labels: map[string]string{discoveryv1.LabelServiceName: service, discoveryv1.LabelManagedBy: "dbkeeper-tests"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{host}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
		},
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("publishing the object store: creating %T %s: %w", o, o.GetName(), err)
		}
	}
	return net.JoinHostPort(InClusterHost(service), portText), nil
}

// StartPublished starts a store listening on host (the node IP on the
// host's bridge) at a free port, publishes it in the cluster c as service
// (Publish) and creates bucket. It returns the store and the endpoint pods
// use; on error nothing is left running.
func StartPublished(ctx context.Context, c client.Client, host, service, bucket string) (*Store, string, error) {
	port, err := framework.FreePort()
	if err != nil {
		return nil, "", fmt.Errorf("finding a free port: %w", err)
	}
	store, err := Start(ctx, Options{Addr: net.JoinHostPort(host, strconv.Itoa(port)), DNSNames: []string{InClusterHost(service)}})
	if err != nil {
		return nil, "", fmt.Errorf("starting the object store: %w", err)
	}
	endpoint, err := store.Publish(ctx, c, service)
	if err == nil {
		err = store.CreateBucket(ctx, bucket)
	}
	if err != nil {
		return nil, "", errors.Join(err, store.Stop())
	}
	return store, endpoint, nil
}
