/**
 * How sizes, shares, holders and states read in every view, by subject: one module each.
 */
export * from './units';
export * from './tiers';
export * from './holders';
export * from './idle';
export * from './bursts';
export * from './usage';
export * from './elsewhere';
export * from './elastic';
export * from './status';
export * from './cluster';
