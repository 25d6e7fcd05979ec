import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['src/**/*.test.ts', 'test/**/*.test.ts', 'scripts/**/*.test.ts'],
    // Every temporary file of the run goes under one directory, removed at the end.
    globalSetup: ['test/support/global-setup.ts'],
    // Sandbox tests start real gVisor containers: give them room, and run files one
    // at a time on these 2-core machines so timings stay honest.
    testTimeout: 120_000,
    hookTimeout: 180_000,
    fileParallelism: false,
    pool: 'forks',
  },
});
