package plugin

import (
	"context"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/internal/conditions"
)

// statusEvents is how many of a Database's last events status shows.
const statusEvents = 5

// eventsAbout are the events of namespace about the objects involved
// ("Kind/name"), oldest first.
func eventsAbout(ctx context.Context, env Env, namespace string, involved map[string]bool) ([]*corev1.Event, error) {
	var events corev1.EventList
	if err := env.Client.List(ctx, &events, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing the events of namespace %s: %w", namespace, err)
	}
	var mine []*corev1.Event
	for i := range events.Items {
		e := &events.Items[i]
		if involved[e.InvolvedObject.Kind+"/"+e.InvolvedObject.Name] {
			mine = append(mine, e)
		}
	}
	sort.SliceStable(mine, func(i, j int) bool { return lastSeen(mine[i]).Before(lastSeen(mine[j])) })
	return mine, nil
}

// lastSeen is when an event last happened, whichever API wrote it.
func lastSeen(e *corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// StatusEvents writes the last events about the Database, newest last, for
// the end of status; none writes nothing.
func StatusEvents(out io.Writer, events []*corev1.Event, now time.Time) error {
	if len(events) == 0 {
		return nil
	}
	if len(events) > statusEvents {
		events = events[len(events)-statusEvents:]
	}
	w := &errWriter{w: out}
	w.printf("\nEvents (the last %d)\n", len(events))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AGE\tTYPE\tREASON\tMESSAGE")
	for _, e := range events {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", age(now, lastSeen(e)), e.Type, e.Reason, conditions.Quote(e.Message, 160))
	}
	w.flush(tw)
	return w.err
}
