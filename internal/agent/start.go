package agent

import (
	"errors"
	"fmt"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// startPrimary (under a.op) starts a data directory that would start as a
// primary only once the agent holds the primary lease (decideStart): it
// takes its own, a released, or an expired lease and starts; it rejoins
// another holder as a standby (pg_rewind first). Meanwhile the state is
// Starting and says what it waits for.
func (a *Agent) startPrimary() {
	for {
		if a.ctx.Err() != nil {
			return
		}
		fenced := a.isFenced()
		verdict, why := startWait, ""
		if _, err := a.keeper.read(a.ctx); err != nil {
			why = err.Error()
		} else {
			verdict, why = decideStart(a.cfg.Pod, fenced, a.keeper.observation(), time.Now())
		}
		switch verdict {
		case startTake:
			v, err := a.keeper.tryTake(a.ctx)
			if err == nil && v.May {
				if err := a.clearFenced(); err != nil {
					a.fail(err)
					return
				}
				a.log.Info("Holding the primary lease: starting as the primary", "why", why)
				if err := a.prepareMajor(); err != nil {
					a.fail(err)
					return
				}
				if err := a.startServer(agentapi.StateStarting); err != nil {
					a.fail(err)
				}
				return
			}
			if err != nil && !errors.Is(err, errLeaseTaken) {
				why = err.Error()
			}
		case startRejoin:
			a.log.Info("Another instance holds the primary lease: rejoining it as a standby", "why", why)
			if !fenced {
				a.setState(agentapi.StateFenced, "not starting as a primary: "+why)
			}
			a.rejoin()
			return
		}
		a.setState(agentapi.StateStarting, fmt.Sprintf("waiting for the primary lease held by %q: %s", a.keeper.observation().Record.Holder, why))
		select {
		case <-a.ctx.Done():
			return
		case <-time.After(agentapi.LeaseRetryPeriod):
		}
	}
}

// startInPlace (under a.op) starts the data directory that holds a
// cluster as a restart of the container would (begin): as the primary
// through startPrimary when the agent keeps a lease and the directory
// would start a primary, else with startServer (a standby with its
// standby.signal, or a primary without a lease); a start that cannot
// begin fails the agent.
func (a *Agent) startInPlace() {
	if a.keeper != nil && !isStandby(a.cfg.PGData) {
		a.startPrimary()
		return
	}
	if err := a.startServer(agentapi.StateStarting); err != nil {
		a.fail(err)
	}
}
