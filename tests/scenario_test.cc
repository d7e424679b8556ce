// placeholder until scenarios land
#include <gtest/gtest.h>
