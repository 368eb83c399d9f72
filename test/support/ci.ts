/**
 * Under CI (.ci/run sets LANEWAKE_CI=1; most CI services set CI): a tool a test needs that is missing fails the test
 * there, where elsewhere it skips.
 */
export const underCi = process.env.CI === '1' || process.env.CI === 'true' || process.env.LANEWAKE_CI === '1';
