package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// WriteLog records every write an operator's client sends to the API server,
// as "verb kind namespace/name", so tests can count writes and say which.
type WriteLog struct {
	mu      sync.Mutex
	entries []string
}

func (w *WriteLog) add(verb string, kind, key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.entries = append(w.entries, fmt.Sprintf("%s %s %s", verb, kind, key))
}

// Len is the number of writes so far.
func (w *WriteLog) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.entries)
}

// Since returns the writes after the first n.
func (w *WriteLog) Since(n int) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.entries[n:]...)
}

// NewClient is a client.NewClientFunc: controller-runtime's client, with its
// writes recorded.
func (w *WriteLog) NewClient(cfg *rest.Config, o client.Options) (client.Client, error) {
	c, err := client.New(cfg, o)
	if err != nil {
		return nil, err
	}
	return &recordingClient{Client: c, log: w}, nil
}

type recordingClient struct {
	client.Client
	log *WriteLog
}

func objectKey(obj client.Object) string { return obj.GetNamespace() + "/" + obj.GetName() }

func (c *recordingClient) kind(obj runtime.Object) string {
	gvk, err := c.GroupVersionKindFor(obj)
	if err != nil {
		return fmt.Sprintf("%T", obj)
	}
	return gvk.Kind
}

// applyTarget reads kind and name out of an apply configuration.
func applyTarget(obj runtime.ApplyConfiguration) (string, string) {
	var head struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Namespace string `json:"namespace"`
			Name      string `json:"name"`
		} `json:"metadata"`
	}
	data, _ := json.Marshal(obj)
	_ = json.Unmarshal(data, &head)
	return head.Kind, head.Metadata.Namespace + "/" + head.Metadata.Name
}

// applyOwner is the field manager among apply options.
func applyOwner(opts []client.ApplyOption) string {
	o := &client.ApplyOptions{}
	o.ApplyOptions(opts)
	return o.FieldManager
}

func (c *recordingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	c.log.add("create", c.kind(obj), objectKey(obj))
	return c.Client.Create(ctx, obj, opts...)
}

func (c *recordingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	c.log.add("update", c.kind(obj), objectKey(obj))
	return c.Client.Update(ctx, obj, opts...)
}

func (c *recordingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	c.log.add("patch", c.kind(obj), objectKey(obj))
	return c.Client.Patch(ctx, obj, patch, opts...)
}

func (c *recordingClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	kind, key := applyTarget(obj)
	c.log.add("apply", kind, key+" by "+applyOwner(opts))
	return c.Client.Apply(ctx, obj, opts...)
}

func (c *recordingClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	c.log.add("delete", c.kind(obj), objectKey(obj))
	return c.Client.Delete(ctx, obj, opts...)
}

func (c *recordingClient) DeleteAllOf(ctx context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	c.log.add("deletecollection", c.kind(obj), obj.GetNamespace())
	return c.Client.DeleteAllOf(ctx, obj, opts...)
}

func (c *recordingClient) Status() client.SubResourceWriter { return c.SubResource("status") }

func (c *recordingClient) SubResource(name string) client.SubResourceClient {
	return &recordingSubResource{SubResourceClient: c.Client.SubResource(name), parent: c, name: name}
}

type recordingSubResource struct {
	client.SubResourceClient
	parent *recordingClient
	name   string
}

func (s *recordingSubResource) Create(ctx context.Context, obj client.Object, sub client.Object, opts ...client.SubResourceCreateOption) error {
	s.parent.log.add("create/"+s.name, s.parent.kind(obj), objectKey(obj))
	return s.SubResourceClient.Create(ctx, obj, sub, opts...)
}

func (s *recordingSubResource) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	s.parent.log.add("update/"+s.name, s.parent.kind(obj), objectKey(obj))
	return s.SubResourceClient.Update(ctx, obj, opts...)
}

func (s *recordingSubResource) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	s.parent.log.add("patch/"+s.name, s.parent.kind(obj), objectKey(obj))
	return s.SubResourceClient.Patch(ctx, obj, patch, opts...)
}

func (s *recordingSubResource) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	kind, key := applyTarget(obj)
	o := &client.SubResourceApplyOptions{}
	o.ApplyOpts(opts)
	s.parent.log.add("apply/"+s.name, kind, key+" by "+o.FieldManager)
	return s.SubResourceClient.Apply(ctx, obj, opts...)
}
