// ESLint (flat config) for probe's browser JavaScript: the view layer shared by the app, the notebook view and
// the report (probe/views/assets/views.js) and the dashboard's assets (app/assets/*.js). Run from the repository
// root by `npm run --prefix js lint` (scripts/test.sh). Plain ES2017 scripts in the browser: no modules, no build.
import js from "@eslint/js";
import globals from "globals";

export default [
    {ignores: ["probe/views/assets/3Dmol-min.js"]},  // the vendored 3Dmol.js build (BSD-3, LICENSE beside it)
    js.configs.recommended,
    {
        files: ["probe/views/assets/**/*.js", "app/assets/**/*.js"],
        languageOptions: {
            ecmaVersion: 2017,
            sourceType: "script",
            globals: {...globals.browser},
        },
        linterOptions: {reportUnusedDisableDirectives: "error"},
        rules: {
            "no-unused-vars": ["error", {args: "after-used", caughtErrors: "all"}],
            "no-shadow": "error",           // a `view` inside viewOf() hiding the explorer's `view` reads wrong
            "no-use-before-define": ["error", {functions: false, classes: true, variables: true}],
            "no-implicit-globals": "error", // every file is one IIFE: nothing leaks onto window by accident
            "no-var": "off",                // ES5-style var throughout; block scoping is not relied on
            "eqeqeq": ["error", "always"],
            "no-eval": "error",
            "no-implied-eval": "error",
            "no-new-func": "error",
            "no-loop-func": "error",
            "no-redeclare": "error",
            "no-self-compare": "error",
            "no-unmodified-loop-condition": "error",
            "no-unreachable-loop": "error",
            "no-constant-binary-expression": "error",
            "no-template-curly-in-string": "error",
            "radix": "error",               // parseInt(text, 10) everywhere
            "strict": "off",
            "curly": ["error", "all"],
        },
    },
];
