// Loaded into a gateway a bench starts (node --import): the gateway's own event-loop
// delay, as Node measures it (perf_hooks.monitorEventLoopDelay, 1 ms resolution), sent to
// the bench over the IPC channel on request. Nothing here runs unless the bench asks.
import { monitorEventLoopDelay } from 'node:perf_hooks';

const histogram = monitorEventLoopDelay({ resolution: 1 });
process.on('message', (m) => {
  if (m === 'loop-delay:start') {
    histogram.reset();
    histogram.enable();
  } else if (m === 'loop-delay:stop') {
    histogram.disable();
    process.send?.({ loopDelay: { max: histogram.max / 1e6, p99: histogram.percentile(99) / 1e6 } });
  }
});
// The channel must not keep a gateway that is shutting down alive.
process.channel?.unref();
