import lodash from "lodash";
export default () => ({ lodash: typeof lodash });
