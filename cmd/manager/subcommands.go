package main

import (
	"errors"
	"flag"
	"fmt"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/dbkeeper/dbkeeper/internal/agent"
	"github.com/dbkeeper/dbkeeper/internal/logging"
)

// subcommand runs `manager copy-self DIR`, `manager agent [flags] --
// COMMAND...` or `manager verify-backup [flags]` when args name one; ok is
// false for the manager itself.
func subcommand(args []string) (ok bool, err error) {
	if len(args) == 0 {
		return false, nil
	}
	switch args[0] {
	case "copy-self":
		if len(args) != 2 {
			return true, errors.New("usage: manager copy-self DIR")
		}
		dst, err := agent.CopySelf(args[1])
		if err == nil {
			fmt.Println("copied the manager to", dst)
		}
		return true, err
	case "agent":
		return true, runAgent(args[1:])
	case agent.VerifyCommand:
		zapOpts := zap.Options{TimeEncoder: zapcore.ISO8601TimeEncoder}
		err := agent.VerifyMain(args[1:], func(fs *flag.FlagSet) { zapOpts.BindFlags(fs) },
			func() logr.Logger { return zapr.NewLogger(zap.NewRaw(zap.UseFlagOptions(&zapOpts))) })
		if errors.Is(err, flag.ErrHelp) {
			err = nil
		}
		return true, err
	}
	return false, nil
}

// runAgent parses the agent's flags (with the manager's logging ones) and
// runs it until SIGTERM.
func runAgent(args []string) error {
	zapOpts := zap.Options{TimeEncoder: zapcore.ISO8601TimeEncoder}
	cfg, err := agent.ParseFlags(args, func(fs *flag.FlagSet) { zapOpts.BindFlags(fs) })
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	log := logging.Capped(zapr.NewLogger(zap.NewRaw(zap.UseFlagOptions(&zapOpts))))
	return agent.Main(cfg, log)
}
